/* bulkwrite.h - sequential writing of large files at disk speed.
 *
 * Data is gathered in aligned staging buffers and written with O_DIRECT in large blocks, so tens
 * of gigabytes go to disk without being copied through (and evicting) the page cache. Two
 * buffers alternate: while a background thread writes a full one, the caller fills the other, so
 * producing the bytes and writing them overlap. The unaligned tail is written after O_DIRECT is
 * switched off. Where the file system refuses O_DIRECT (tmpfs, some overlays) it falls back to
 * ordinary buffered writes. The file is replaced as a whole (util/fileio.h's FileReplace: written
 * to path.tmp and renamed over path once complete and synced), so a reader or a kill never sees
 * a partial file and nothing but a regular file is ever replaced. */
#ifndef DF_BULKWRITE_H
#define DF_BULKWRITE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define BULK_BUF (16u << 20)

#include "util/fileio.h"

typedef struct {
    FileReplace rep;     /* the temporary being written */
    int fd;
    int direct;
    uint8_t *buf[2];     /* staging buffers, BULK_BUF bytes each, 4096-aligned */
    int cur;             /* the one being filled */
    size_t used;
    const char *label;   /* file name for messages (borrowed) */
    /* the writer thread's hand-over: one full buffer at a time */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;         /* a full buffer waits for / is in the writer */
    int stop;
    int failed;
    char err[512];
} BulkWriter;

/* Starts replacing path (see FileReplace for what is refused) and the writer thread. Returns 0,
 * or -1 with a message (nothing to close then; path untouched). */
int bulk_open(BulkWriter *w, const char *path);
/* Space to produce up to *avail bytes in place; commit them with bulk_commit. */
uint8_t *bulk_reserve(BulkWriter *w, size_t *avail);
int bulk_commit(BulkWriter *w, size_t n);
int bulk_write(BulkWriter *w, const void *data, size_t n);
/* Flushes, fsyncs and renames the new file over path. Returns -1 with a message on any
 * failure (path is then untouched and the temporary removed). */
int bulk_close(BulkWriter *w);

#endif

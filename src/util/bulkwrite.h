/* bulkwrite.h - sequential writing of large files at disk speed.
 *
 * Data is gathered in an aligned staging buffer and written with O_DIRECT in large blocks, so
 * tens of gigabytes go to disk without being copied through (and evicting) the page cache. The
 * unaligned tail is written after O_DIRECT is switched off. Where the file system refuses
 * O_DIRECT (tmpfs, some overlays) it falls back to ordinary buffered writes. */
#ifndef DF_BULKWRITE_H
#define DF_BULKWRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;
    int direct;
    uint8_t *buf;       /* staging buffer, BULK_BUF bytes, 4096-aligned */
    size_t used;
    const char *label;  /* file name for messages (borrowed) */
} BulkWriter;

#define BULK_BUF (16u << 20)

/* Creates/truncates path. */
int bulk_open(BulkWriter *w, const char *path);
/* Space to produce up to *avail bytes in place; commit them with bulk_commit. */
uint8_t *bulk_reserve(BulkWriter *w, size_t *avail);
int bulk_commit(BulkWriter *w, size_t n);
int bulk_write(BulkWriter *w, const void *data, size_t n);
/* Flushes, fsyncs and closes. Returns -1 with a message on any failure (the file is then
 * incomplete and the caller removes it). */
int bulk_close(BulkWriter *w);

#endif

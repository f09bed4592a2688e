/* iopool.h - the streaming store's reads, run in the background so the compute threads never wait
 * on a single request: a layer's experts (and the next layer's spine) are read in parallel.
 *
 * A job describes one read - alen bytes at aoff (both SHARD_ALIGN-aligned) of file `file` of a
 * Shards set into an aligned buffer, of which at least `need` must exist (shardio.h) - and is
 * intrusive (embedded in its owner), so submitting allocates nothing. Jobs wait in three queues,
 * served in order: IO_URGENT (what the forward waits for now), IO_AHEAD (the next streamed spine
 * layer), IO_GUESS (experts read on a guess); promote moves a queued job to IO_URGENT. When the
 * read ends, job->done(job, rc) runs on a pool thread: rc 0, or -1 with df_errmsg() naming the
 * file, the byte range and what job->describe says the bytes are. The pool knows nothing of what
 * is read.
 *
 * Two backends with the same behaviour (IoBackend; K3_IO):
 *   IO_THREADS  `depth` threads, each running one blocking read at a time;
 *   IO_URING    one io_uring with up to `depth` reads in flight, submitted from the submitting
 *               thread (a whole batch in one system call) and completed by one thread.
 * Buffers registered with iopool_register_buffers are read with fixed-buffer reads (no page
 * pinning per read) where the backend has them. */
#ifndef DF_IOPOOL_H
#define DF_IOPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "store/options.h"
#include "store/shardio.h"

typedef enum { IO_URGENT, IO_AHEAD, IO_GUESS, IO_CLASSES } IoClass;

typedef struct IoJob {
    const Shards *files;
    int file;
    uint64_t aoff, alen, need;
    uint8_t *buf;
    void (*done)(struct IoJob *job, int rc);
    void (*describe)(const struct IoJob *job, char *what, size_t n);
    /* the pool's */
    struct IoJob *next;   /* queue link */
    int queued;           /* 1 while waiting in a queue (under the pool's lock) */
    uint64_t got;         /* bytes read so far (io_uring resubmits short reads) */
} IoJob;

typedef struct IoPool IoPool;

/* depth: threads, or reads in flight (1..256). Fails with a message (io_uring refused by the
 * kernel or a sandbox, out of threads). */
int iopool_create(IoPool **out, IoBackend backend, int depth);
/* Waits for running reads, drops queued ones (their owners are being torn down), joins. */
void iopool_destroy(IoPool *p);
int iopool_depth(const IoPool *p);
IoBackend iopool_backend(const IoPool *p);
const char *iopool_backend_name(IoBackend b);
void iopool_submit(IoPool *p, IoJob *job, IoClass c);
/* The same for n jobs at once (one wake-up, or one system call). */
void iopool_submit_many(IoPool *p, IoJob *const *jobs, int n, IoClass c);
/* Moves a queued job to the end of the urgent queue (no-op once it has started). */
void iopool_promote(IoPool *p, IoJob *job);
/* io_uring: registers [base, base + len) for fixed-buffer reads (pins its pages now). Returns 0,
 * or -1 with a message (reads then stay ordinary). The threads backend has nothing to register. */
int iopool_register_buffers(IoPool *p, uint8_t *base, size_t len);

#endif

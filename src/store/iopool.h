/* iopool.h - a few threads that run blocking reads so the compute threads never wait on a
 * single request: a layer's experts (and the next layer's spine) are read in parallel.
 *
 * Jobs are intrusive (embedded in the buffer they fill), so submitting allocates nothing. Two
 * queues: urgent jobs (what the forward waits for now) always start before background jobs
 * (prefetch). A job's run function does the read and signals its owner; the pool knows nothing of
 * what is read. */
#ifndef DF_IOPOOL_H
#define DF_IOPOOL_H

typedef struct IoJob {
    void (*run)(struct IoJob *job);
    struct IoJob *next;   /* queue link, owned by the pool while queued */
    int queued;           /* 1 while waiting in a queue (under the pool's lock) */
} IoJob;

typedef struct IoPool IoPool;

/* Starts n_threads (>= 1) reader threads. NULL with a message when the system refuses one. */
IoPool *iopool_create(int n_threads);
/* Waits for running jobs, drops queued ones (their owners are being torn down), joins. */
void iopool_destroy(IoPool *p);
int iopool_threads(const IoPool *p);
void iopool_submit(IoPool *p, IoJob *job, int urgent);
/* Moves a queued background job to the end of the urgent queue (no-op once it has started). */
void iopool_promote(IoPool *p, IoJob *job);

#endif

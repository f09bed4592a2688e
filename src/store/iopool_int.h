/* iopool_int.h - what the I/O pool (iopool.c) and its io_uring backend (iopool_uring.c) share.
 * Internal to those two files. */
#ifndef DF_IOPOOL_INT_H
#define DF_IOPOOL_INT_H

#include <pthread.h>

#include "store/iopool.h"

#define IOPOOL_MAX_DEPTH 256

typedef struct {
    IoJob *head, *tail;
} IoQueue;

typedef struct IoRing IoRing; /* iopool_uring.c's: the ring and its registered buffers */

struct IoPool {
    IoBackend backend;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* threads: a job was queued, or stop */
    IoQueue q[IO_CLASSES];
    int stop;
    int depth;
    pthread_t *threads;      /* threads: depth workers; uring: one completer */
    int n_threads;
    IoRing *ring;            /* uring only */
};

/* The next job by class (caller holds mu), or NULL. */
IoJob *iopool_next_job(IoPool *p);
/* Ends a job: checks what arrived and tells its owner (no lock held). err: errno of a failed read. */
void iopool_finish(IoJob *job, int err);

/* The io_uring backend. Where the system has no io_uring (macOS) uring_start fails with a message
 * and the others are never called. */
/* Creates the ring for p->depth reads and starts the completion thread (p->threads[0]). */
int uring_start(IoPool *p);
/* Moves queued jobs into the ring while it has room, and submits (caller holds mu); `resubmitted`
 * reads were already put back in the ring by the completer. */
void uring_fill(IoPool *p, int resubmitted);
/* Queues the stop marker, which the completer sees after the reads in flight (caller holds mu). */
void uring_stop(IoPool *p);
/* Frees the ring, after the completion thread has been joined. */
void uring_close(IoPool *p);
/* iopool_register_buffers for the ring. */
int uring_register(IoPool *p, uint8_t *base, size_t len);

#endif

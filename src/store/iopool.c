/* iopool.c - the I/O pool (iopool.h): its queues, the threads backend, and the calls into the
 * io_uring backend (iopool_uring.c). */
#include "store/iopool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/iopool_int.h"
#include "util/err.h"

static void push(IoQueue *q, IoJob *j) {
    j->next = NULL;
    if (q->tail) q->tail->next = j;
    else q->head = j;
    q->tail = j;
}

static IoJob *pop(IoQueue *q) {
    IoJob *j = q->head;
    if (j && !(q->head = j->next)) q->tail = NULL;
    return j;
}

static int unlink_job(IoQueue *q, IoJob *j) {
    IoJob *prev = NULL;
    for (IoJob *at = q->head; at; prev = at, at = at->next)
        if (at == j) {
            if (prev) prev->next = j->next;
            else q->head = j->next;
            if (q->tail == j) q->tail = prev;
            return 1;
        }
    return 0;
}

IoJob *iopool_next_job(IoPool *p) {
    for (int c = 0; c < IO_CLASSES; c++) {
        IoJob *j = pop(&p->q[c]);
        if (j) return j->queued = 0, j;
    }
    return NULL;
}

void iopool_finish(IoJob *job, int err) {
    char what[96];
    job->describe(job, what, sizeof what);
    job->done(job, shard_read_finish(job->files, job->file, job->aoff, job->alen, job->need, job->got, err, what));
}

/* ---- threads: one blocking read per thread ---- */

static void run_read(IoJob *job) {
    int err = 0;
    job->got = 0;
    while (job->got < job->need) {
        ssize_t r = pread(job->files->fd[job->file], job->buf + job->got, job->alen - job->got, (off_t)(job->aoff + job->got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            err = r < 0 ? errno : 0;
            break;
        }
        job->got += (uint64_t)r;
    }
    iopool_finish(job, err);
}

static void *worker(void *arg) {
    IoPool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        IoJob *j = iopool_next_job(p);
        if (!j) {
            if (p->stop) break;
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        run_read(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- the pool ---- */

int iopool_create(IoPool **out, IoBackend backend, int depth) {
    *out = NULL;
    if (depth < 1 || depth > IOPOOL_MAX_DEPTH) return df_fail("I/O depth %d is not in 1..%d", depth, IOPOOL_MAX_DEPTH);
    IoPool *p = df_calloc(1, sizeof *p);
    p->backend = backend, p->depth = depth;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    if (backend == IO_URING) {
        if (uring_start(p)) return pthread_mutex_destroy(&p->mu), pthread_cond_destroy(&p->work), free(p->threads), free(p), -1;
        *out = p;
        return 0;
    }
    p->threads = df_calloc((size_t)depth, sizeof *p->threads);
    for (; p->n_threads < depth; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, worker, p)) {
            iopool_destroy(p);
            return df_fail("cannot start I/O thread %d of %d", p->n_threads + 1, depth);
        }
    *out = p;
    return 0;
}

void iopool_destroy(IoPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    for (int c = 0; c < IO_CLASSES; c++) p->q[c].head = p->q[c].tail = NULL;
    p->stop = 1;
    if (p->backend == IO_URING) uring_stop(p);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    if (p->backend == IO_URING) uring_close(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    free(p->threads);
    free(p);
}

int iopool_depth(const IoPool *p) { return p->depth; }
IoBackend iopool_backend(const IoPool *p) { return p->backend; }
const char *iopool_backend_name(IoBackend b) { return b == IO_URING ? "io_uring" : "threads"; }

void iopool_submit_many(IoPool *p, IoJob *const *jobs, int n, IoClass c) {
    if (n <= 0) return;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < n; i++) jobs[i]->queued = 1, push(&p->q[c], jobs[i]);
    if (p->backend == IO_URING) uring_fill(p, 0);
    else if (n == 1) pthread_cond_signal(&p->work);
    else pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void iopool_submit(IoPool *p, IoJob *job, IoClass c) { iopool_submit_many(p, &job, 1, c); }

void iopool_promote(IoPool *p, IoJob *job) {
    pthread_mutex_lock(&p->mu);
    for (int c = IO_URGENT + 1; c < IO_CLASSES && job->queued; c++)
        if (unlink_job(&p->q[c], job)) {
            push(&p->q[IO_URGENT], job);
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

int iopool_register_buffers(IoPool *p, uint8_t *base, size_t len) {
    if (p->backend != IO_URING || len == 0) return 0;
    return uring_register(p, base, len);
}

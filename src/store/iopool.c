#include "store/iopool.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "util/err.h"

#define MAX_DEPTH 256
#define REG_PIECE ((size_t)1 << 30) /* the kernel registers fixed buffers of at most 1 GiB each */

typedef struct {
    IoJob *head, *tail;
} Queue;

struct IoPool {
    IoBackend backend;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* threads: a job was queued, or stop */
    Queue q[IO_CLASSES];
    int stop;
    int depth;
    pthread_t *threads;      /* threads: depth workers; uring: one completer */
    int n_threads;
    struct io_uring ring;    /* uring only */
    int inflight;            /* uring: reads in the ring (under mu) */
    uint8_t *reg_base;       /* uring: registered range, in REG_PIECE pieces */
    size_t reg_len;
};

static void push(Queue *q, IoJob *j) {
    j->next = NULL;
    if (q->tail) q->tail->next = j;
    else q->head = j;
    q->tail = j;
}

static IoJob *pop(Queue *q) {
    IoJob *j = q->head;
    if (j && !(q->head = j->next)) q->tail = NULL;
    return j;
}

static int unlink_job(Queue *q, IoJob *j) {
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

/* The next job by class (caller holds mu). */
static IoJob *next_job(IoPool *p) {
    for (int c = 0; c < IO_CLASSES; c++) {
        IoJob *j = pop(&p->q[c]);
        if (j) return j->queued = 0, j;
    }
    return NULL;
}

/* Ends a job: checks what arrived and tells its owner (no lock held). */
static void finish(IoJob *job, int err) {
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
    finish(job, err);
}

static void *worker(void *arg) {
    IoPool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        IoJob *j = next_job(p);
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

/* ---- io_uring: reads submitted by the caller, completed by one thread ---- */

/* Puts the rest of job's read in the ring (caller holds mu; the ring has room). */
static void prep_read(IoPool *p, IoJob *job) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring); /* never NULL: at most depth in flight */
    uint8_t *dst = job->buf + job->got;
    unsigned len = (unsigned)(job->alen - job->got);
    int fd = job->files->fd[job->file];
    off_t off = (off_t)(job->aoff + job->got);
    if (p->reg_len && dst >= p->reg_base && dst + len <= p->reg_base + p->reg_len &&
        (size_t)(dst - p->reg_base) / REG_PIECE == (size_t)(dst + len - 1 - p->reg_base) / REG_PIECE)
        io_uring_prep_read_fixed(sqe, fd, dst, len, off, (int)((size_t)(dst - p->reg_base) / REG_PIECE));
    else
        io_uring_prep_read(sqe, fd, dst, len, off);
    io_uring_sqe_set_data(sqe, job);
}

/* Moves queued jobs into the ring while it has room, and submits (caller holds mu). */
static void fill_ring(IoPool *p, int resubmitted) {
    int added = resubmitted;
    IoJob *j;
    while (p->inflight < p->depth && (j = next_job(p))) {
        j->got = 0;
        prep_read(p, j);
        p->inflight++, added++;
    }
    while (added > 0) {
        int r = io_uring_submit(&p->ring);
        if (r >= 0) added -= r > 0 ? r : added;
        else if (r != -EINTR && r != -EAGAIN && r != -EBUSY) break; /* the completer sees the failures */
    }
}

/* One completion: 1 if the job is finished (err set), 0 if the rest was put back in the ring. */
static int complete_one(IoPool *p, IoJob *job, int res, int *err) {
    *err = 0;
    if (res == -EINTR || res == -EAGAIN) return prep_read(p, job), 0;
    if (res < 0) return *err = -res, 1;
    job->got += (uint64_t)res;
    if (res > 0 && job->got < job->need) return prep_read(p, job), 0;
    return 1;
}

static void *completer(void *arg) {
    IoPool *p = arg;
    IoJob *ended[MAX_DEPTH];
    int errs[MAX_DEPTH], stopping = 0;
    for (;;) {
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe(&p->ring, &cqe);
        if (r < 0) continue; /* EINTR */
        int n_ended = 0, resubmitted = 0;
        unsigned head, seen = 0;
        pthread_mutex_lock(&p->mu);
        io_uring_for_each_cqe(&p->ring, head, cqe) {
            IoJob *job = io_uring_cqe_get_data(cqe);
            seen++;
            if (!job) { /* the stop marker */
                stopping = 1, p->inflight--;
                continue;
            }
            if (complete_one(p, job, cqe->res, &errs[n_ended])) ended[n_ended++] = job, p->inflight--;
            else resubmitted++;
        }
        io_uring_cq_advance(&p->ring, seen);
        fill_ring(p, resubmitted);
        int quit = stopping && p->inflight == 0;
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < n_ended; i++) finish(ended[i], errs[i]);
        if (quit) return NULL;
    }
}

static int uring_start(IoPool *p) {
    int r = io_uring_queue_init((unsigned)p->depth + 1, &p->ring, 0); /* + the stop marker */
    if (r < 0) return df_fail("K3_IO=uring: io_uring is not available here: %s (K3_IO=threads reads without it)", strerror(-r));
    p->threads = df_calloc(1, sizeof *p->threads);
    if (pthread_create(&p->threads[0], NULL, completer, p)) {
        io_uring_queue_exit(&p->ring);
        return df_fail("cannot start the I/O completion thread");
    }
    p->n_threads = 1;
    return 0;
}

/* ---- the pool ---- */

int iopool_create(IoPool **out, IoBackend backend, int depth) {
    *out = NULL;
    if (depth < 1 || depth > MAX_DEPTH) return df_fail("I/O depth %d is not in 1..%d", depth, MAX_DEPTH);
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
    if (p->backend == IO_URING) { /* a marker the completer sees after the reads in flight */
        struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, NULL);
        p->inflight++;
        while (io_uring_submit(&p->ring) < 0) {}
    }
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    if (p->backend == IO_URING) io_uring_queue_exit(&p->ring);
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
    if (p->backend == IO_URING) fill_ring(p, 0);
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
    size_t n = (len + REG_PIECE - 1) / REG_PIECE;
    struct iovec *iov = df_malloc(sizeof *iov * n);
    for (size_t i = 0; i < n; i++)
        iov[i].iov_base = base + i * REG_PIECE, iov[i].iov_len = len - i * REG_PIECE < REG_PIECE ? len - i * REG_PIECE : REG_PIECE;
    pthread_mutex_lock(&p->mu);
    int r = io_uring_register_buffers(&p->ring, iov, (unsigned)n);
    if (r == 0) p->reg_base = base, p->reg_len = len;
    pthread_mutex_unlock(&p->mu);
    free(iov);
    return r == 0 ? 0 : df_fail("io_uring: cannot register %.2f GB of read buffers: %s", len / 1e9, strerror(-r));
}

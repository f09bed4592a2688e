/* iopool_uring.c - the I/O pool's io_uring backend (K3_IO=uring): reads submitted by the caller, a
 * whole batch in one system call, and completed by one thread. Linux only: elsewhere (macOS)
 * uring_start refuses with a message and the threads backend reads. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/iopool_int.h"
#include "util/err.h"

#ifdef __linux__
#include <liburing.h>
#include <sys/uio.h>

#define REG_PIECE ((size_t)1 << 30) /* the kernel registers fixed buffers of at most 1 GiB each */

struct IoRing {
    struct io_uring ring;
    int inflight;      /* reads in the ring (under the pool's mu) */
    uint8_t *reg_base; /* registered range, in REG_PIECE pieces */
    size_t reg_len;
};

/* Puts the rest of job's read in the ring (caller holds mu; the ring has room). */
static void prep_read(IoRing *g, IoJob *job) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&g->ring); /* never NULL: at most depth in flight */
    uint8_t *dst = job->buf + job->got;
    unsigned len = (unsigned)(job->alen - job->got);
    int fd = job->files->fd[job->file];
    off_t off = (off_t)(job->aoff + job->got);
    if (g->reg_len && dst >= g->reg_base && dst + len <= g->reg_base + g->reg_len &&
        (size_t)(dst - g->reg_base) / REG_PIECE == (size_t)(dst + len - 1 - g->reg_base) / REG_PIECE)
        io_uring_prep_read_fixed(sqe, fd, dst, len, off, (int)((size_t)(dst - g->reg_base) / REG_PIECE));
    else
        io_uring_prep_read(sqe, fd, dst, len, off);
    io_uring_sqe_set_data(sqe, job);
}

void uring_fill(IoPool *p, int resubmitted) {
    IoRing *g = p->ring;
    int added = resubmitted;
    IoJob *j;
    while (g->inflight < p->depth && (j = iopool_next_job(p))) {
        j->got = 0;
        prep_read(g, j);
        g->inflight++, added++;
    }
    while (added > 0) {
        int r = io_uring_submit(&g->ring);
        if (r >= 0) added -= r > 0 ? r : added;
        else if (r != -EINTR && r != -EAGAIN && r != -EBUSY) break; /* the completer sees the failures */
    }
}

/* One completion: 1 if the job is finished (err set), 0 if the rest was put back in the ring. */
static int complete_one(IoRing *g, IoJob *job, int res, int *err) {
    *err = 0;
    if (res == -EINTR || res == -EAGAIN) return prep_read(g, job), 0;
    if (res < 0) return *err = -res, 1;
    job->got += (uint64_t)res;
    if (res > 0 && job->got < job->need) return prep_read(g, job), 0;
    return 1;
}

static void *completer(void *arg) {
    IoPool *p = arg;
    IoRing *g = p->ring;
    IoJob *ended[IOPOOL_MAX_DEPTH];
    int errs[IOPOOL_MAX_DEPTH], stopping = 0;
    for (;;) {
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe(&g->ring, &cqe);
        if (r < 0) continue; /* EINTR */
        int n_ended = 0, resubmitted = 0;
        unsigned head, seen = 0;
        pthread_mutex_lock(&p->mu);
        io_uring_for_each_cqe(&g->ring, head, cqe) {
            IoJob *job = io_uring_cqe_get_data(cqe);
            seen++;
            if (!job) { /* the stop marker */
                stopping = 1, g->inflight--;
                continue;
            }
            if (complete_one(g, job, cqe->res, &errs[n_ended])) ended[n_ended++] = job, g->inflight--;
            else resubmitted++;
        }
        io_uring_cq_advance(&g->ring, seen);
        uring_fill(p, resubmitted);
        int quit = stopping && g->inflight == 0;
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < n_ended; i++) iopool_finish(ended[i], errs[i]);
        if (quit) return NULL;
    }
}

int uring_start(IoPool *p) {
    IoRing *g = df_calloc(1, sizeof *g);
    int r = io_uring_queue_init((unsigned)p->depth + 1, &g->ring, 0); /* + the stop marker */
    if (r < 0) {
        free(g);
        return df_fail("K3_IO=uring: io_uring is not available here: %s (K3_IO=threads reads without it)", strerror(-r));
    }
    p->ring = g;
    p->threads = df_calloc(1, sizeof *p->threads);
    if (pthread_create(&p->threads[0], NULL, completer, p)) {
        io_uring_queue_exit(&g->ring);
        free(g), p->ring = NULL;
        return df_fail("cannot start the I/O completion thread");
    }
    p->n_threads = 1;
    return 0;
}

void uring_stop(IoPool *p) {
    IoRing *g = p->ring;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&g->ring);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, NULL);
    g->inflight++;
    while (io_uring_submit(&g->ring) < 0) {}
}

void uring_close(IoPool *p) {
    io_uring_queue_exit(&p->ring->ring);
    free(p->ring), p->ring = NULL;
}

int uring_register(IoPool *p, uint8_t *base, size_t len) {
    IoRing *g = p->ring;
    size_t n = (len + REG_PIECE - 1) / REG_PIECE;
    struct iovec *iov = df_malloc(sizeof *iov * n);
    for (size_t i = 0; i < n; i++)
        iov[i].iov_base = base + i * REG_PIECE, iov[i].iov_len = len - i * REG_PIECE < REG_PIECE ? len - i * REG_PIECE : REG_PIECE;
    pthread_mutex_lock(&p->mu);
    int r = io_uring_register_buffers(&g->ring, iov, (unsigned)n);
    if (r == 0) g->reg_base = base, g->reg_len = len;
    pthread_mutex_unlock(&p->mu);
    free(iov);
    return r == 0 ? 0 : df_fail("io_uring: cannot register %.2f GB of read buffers: %s", len / 1e9, strerror(-r));
}

#else /* no io_uring: K3_IO=uring is refused, the threads backend reads */

int uring_start(IoPool *p) {
    (void)p;
    return df_fail("K3_IO=uring: io_uring exists only on Linux (K3_IO=threads reads without it)");
}
void uring_fill(IoPool *p, int resubmitted) { (void)p, (void)resubmitted; }
void uring_stop(IoPool *p) { (void)p; }
void uring_close(IoPool *p) { (void)p; }
int uring_register(IoPool *p, uint8_t *base, size_t len) {
    (void)p, (void)base, (void)len;
    return 0;
}

#endif

#include "util/bulkwrite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fileio.h"
#include "util/platform.h"

/* Writes a full buffer; O_DIRECT refused at write time (some file systems accept it at open)
 * means: continue buffered. */
static int write_block(BulkWriter *w, const uint8_t *buf, size_t n) {
    if (file_write_full(w->fd, buf, n, w->label) == 0) return 0;
    if (!w->direct) return -1;
    w->direct = 0;
    if (plat_uncached_off(w->fd) != 0) return df_fail("%s: fcntl: %s", w->label, strerror(errno));
    return file_write_full(w->fd, buf, n, w->label);
}

static void *writer_main(void *arg) {
    BulkWriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending) break;
        const uint8_t *buf = w->buf[!w->cur]; /* the caller fills the other one meanwhile */
        pthread_mutex_unlock(&w->mu);
        int rc = write_block(w, buf, BULK_BUF);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->failed) w->failed = 1, snprintf(w->err, sizeof w->err, "%s", df_errmsg());
        w->pending = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int bulk_open(BulkWriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->label = path;
    if (file_replace_begin(&w->rep, path, 1, &w->direct)) return -1;
    w->fd = w->rep.fd;
    w->buf[0] = df_aligned_alloc(4096, BULK_BUF);
    w->buf[1] = df_aligned_alloc(4096, BULK_BUF);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int err = pthread_create(&w->thread, NULL, writer_main, w);
    if (err == 0) return 0;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->buf[0]), free(w->buf[1]);
    file_replace_abort(&w->rep);
    return df_fail("%s: cannot start a writer thread: %s", path, strerror(err));
}

/* Waits until the writer is idle; returns -1 with its message if a write failed. */
static int wait_writer(BulkWriter *w) {
    pthread_mutex_lock(&w->mu);
    while (w->pending) pthread_cond_wait(&w->cv, &w->mu);
    int failed = w->failed;
    pthread_mutex_unlock(&w->mu);
    return failed ? df_fail("%s", w->err) : 0;
}

/* Hands the full current buffer to the writer and switches to the other. */
static int hand_over(BulkWriter *w) {
    if (wait_writer(w)) return -1;
    pthread_mutex_lock(&w->mu);
    w->cur = !w->cur;
    w->pending = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->used = 0;
    return 0;
}

uint8_t *bulk_reserve(BulkWriter *w, size_t *avail) {
    *avail = BULK_BUF - w->used;
    return w->buf[w->cur] + w->used;
}

int bulk_commit(BulkWriter *w, size_t n) {
    w->used += n;
    return w->used == BULK_BUF ? hand_over(w) : 0;
}

int bulk_write(BulkWriter *w, const void *data, size_t n) {
    while (n) {
        size_t avail, take;
        uint8_t *dst = bulk_reserve(w, &avail);
        take = n < avail ? n : avail;
        memcpy(dst, data, take);
        data = (const uint8_t *)data + take;
        n -= take;
        if (bulk_commit(w, take)) return -1;
    }
    return 0;
}

static void stop_writer(BulkWriter *w) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

int bulk_close(BulkWriter *w) {
    int rc = wait_writer(w);
    stop_writer(w);
    const uint8_t *buf = w->buf[w->cur];
    size_t aligned = w->direct ? w->used & ~(size_t)4095 : w->used;
    if (!rc && aligned) rc = write_block(w, buf, aligned);
    if (!rc && w->used > aligned) { /* the unaligned tail goes through the page cache */
        if (plat_uncached_off(w->fd) != 0) rc = df_fail("%s: fcntl: %s", w->label, strerror(errno));
        if (!rc) rc = file_write_full(w->fd, buf + aligned, w->used - aligned, w->label);
    }
    if (rc) file_replace_abort(&w->rep);
    else rc = file_replace_commit(&w->rep);
    w->fd = -1;
    free(w->buf[0]), free(w->buf[1]);
    w->buf[0] = w->buf[1] = NULL;
    return rc;
}

#include "util/bulkwrite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fileio.h"

int bulk_open(BulkWriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->label = path;
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    w->direct = w->fd >= 0;
    if (w->fd < 0 && errno == EINVAL) w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return df_fail("%s: cannot create: %s", path, strerror(errno));
    w->buf = df_aligned_alloc(4096, BULK_BUF);
    return 0;
}

static int flush_full(BulkWriter *w) {
    if (file_write_full(w->fd, w->buf, w->used, w->label) == 0) return w->used = 0, 0;
    if (!w->direct) return -1;
    /* some file systems accept O_DIRECT at open but not on write: continue buffered */
    w->direct = 0;
    if (fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) & ~O_DIRECT) != 0) return df_fail("%s: fcntl: %s", w->label, strerror(errno));
    if (file_write_full(w->fd, w->buf, w->used, w->label)) return -1;
    w->used = 0;
    return 0;
}

uint8_t *bulk_reserve(BulkWriter *w, size_t *avail) {
    *avail = BULK_BUF - w->used;
    return w->buf + w->used;
}

int bulk_commit(BulkWriter *w, size_t n) {
    w->used += n;
    return w->used == BULK_BUF ? flush_full(w) : 0;
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

int bulk_close(BulkWriter *w) {
    int rc = 0;
    size_t aligned = w->direct ? w->used & ~(size_t)4095 : w->used;
    if (aligned) rc = file_write_full(w->fd, w->buf, aligned, w->label);
    if (!rc && w->used > aligned) { /* the unaligned tail goes through the page cache */
        if (fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) & ~O_DIRECT) != 0) rc = df_fail("%s: fcntl: %s", w->label, strerror(errno));
        if (!rc) rc = file_write_full(w->fd, w->buf + aligned, w->used - aligned, w->label);
    }
    if (!rc && fsync(w->fd) != 0) rc = df_fail("%s: fsync failed: %s", w->label, strerror(errno));
    if (close(w->fd) != 0 && !rc) rc = df_fail("%s: close failed: %s", w->label, strerror(errno));
    free(w->buf);
    w->buf = NULL;
    return rc;
}

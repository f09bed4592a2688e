#include "store/shardio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/platform.h"

static uint64_t align_down(uint64_t x) { return x & ~(uint64_t)(SHARD_ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return align_down(x + SHARD_ALIGN - 1); }

uint64_t shard_read_cap(uint64_t offset, uint64_t len) { return align_up(offset - align_down(offset) + len); }

/* Some file systems accept O_DIRECT at open and refuse it at the first read: probe one block. */
static int direct_works(int fd) {
    uint8_t *probe = df_aligned_alloc(SHARD_ALIGN, SHARD_ALIGN);
    ssize_t r = pread(fd, probe, SHARD_ALIGN, 0);
    free(probe);
    return r >= 0;
}

static int open_shard(Shards *s, int i, const char *path) {
    int fd = s->direct ? plat_open_uncached(path, O_RDONLY | O_CLOEXEC, 0) : -1;
    if (fd >= 0 && !direct_works(fd)) close(fd), fd = -1;
    if (fd < 0 && s->direct) {
        if (i > 0) return df_fail("%s: O_DIRECT works for the other shards but not this one", path);
        s->direct = 0, s->refused = 1;
    }
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return df_fail("%s: cannot open: %s", path, strerror(errno));
    s->fd[i] = fd;
    return 0;
}

int shards_open_paths(Shards *s, int n, char *const *paths, int want_direct) {
    memset(s, 0, sizeof *s);
    s->direct = want_direct;
    s->fd = df_malloc(sizeof *s->fd * (size_t)(n ? n : 1));
    s->path = df_calloc((size_t)(n ? n : 1), sizeof *s->path);
    for (int i = 0; i < n; i++) {
        s->path[i] = df_strdup(paths[i]);
        s->n = i + 1;
        if (open_shard(s, i, s->path[i])) {
            s->fd[i] = -1;
            shards_close(s);
            return -1;
        }
    }
    return 0;
}

int shards_open(Shards *s, const Catalog *cat, int want_direct) {
    char **paths = df_calloc((size_t)cat->n_shards + 1, sizeof *paths);
    for (int i = 0; i < cat->n_shards; i++) paths[i] = catalog_shard_path(cat, i);
    int rc = shards_open_paths(s, cat->n_shards, paths, want_direct);
    for (int i = 0; i < cat->n_shards; i++) free(paths[i]);
    free(paths);
    return rc;
}

void shards_close(Shards *s) {
    for (int i = 0; i < s->n; i++) {
        if (s->fd[i] >= 0) close(s->fd[i]);
        free(s->path[i]);
    }
    free(s->fd);
    free(s->path);
    memset(s, 0, sizeof *s);
}

/* Why a read came up short: the file shrank, or it is no longer the install's file. */
static int explain_short(const Shards *s, int i, uint64_t from, uint64_t to, const char *what) {
    struct stat st;
    if (fstat(s->fd[i], &st) == 0 && (uint64_t)st.st_size < to)
        return df_fail("%s: cannot read bytes %llu..%llu (%s): the file is truncated to %llu bytes", s->path[i],
                       (unsigned long long)from, (unsigned long long)to, what, (unsigned long long)st.st_size);
    return df_fail("%s: cannot read bytes %llu..%llu (%s): unexpected end of file", s->path[i], (unsigned long long)from,
                   (unsigned long long)to, what);
}

int shard_read_finish(const Shards *s, int i, uint64_t aoff, uint64_t alen, uint64_t need, uint64_t got, int err,
                      const char *what) {
    if (err)
        return df_fail("%s: cannot read bytes %llu..%llu (%s): %s", s->path[i], (unsigned long long)aoff,
                       (unsigned long long)(aoff + need), what, strerror(err));
    if (got < need) return explain_short(s, i, aoff, aoff + need, what);
    struct stat st;
    /* a shard deleted or replaced (renamed over) while open still reads its old bytes: refuse them */
    if (fstat(s->fd[i], &st) == 0 && st.st_nlink == 0)
        return df_fail("%s: the file was deleted or replaced during the run (reading bytes %llu..%llu, %s)", s->path[i],
                       (unsigned long long)aoff, (unsigned long long)(aoff + need), what);
    if (!s->direct) plat_drop_cached(s->fd[i], aoff, alen);
    return 0;
}

int shard_read_aligned(const Shards *s, int i, uint64_t aoff, uint64_t alen, uint64_t need, uint8_t *buf,
                       const char *what) {
    uint64_t got = 0;
    int err = 0;
    while (got < need) {
        ssize_t r = pread(s->fd[i], buf + got, alen - got, (off_t)(aoff + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            err = r < 0 ? errno : 0;
            break;
        }
        got += (uint64_t)r;
    }
    return shard_read_finish(s, i, aoff, alen, need, got, err, what);
}

int shard_read(const Shards *s, int i, uint64_t offset, uint64_t len, uint8_t *buf, const char *what) {
    uint64_t a = align_down(offset);
    if (shard_read_aligned(s, i, a, shard_read_cap(offset, len), offset + len - a, buf, what) == 0) return 0;
    return -1;
}

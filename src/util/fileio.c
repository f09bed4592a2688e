#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/platform.h"

int file_size_fd(int fd, uint64_t *size, const char *label) {
    struct stat st;
    if (fstat(fd, &st) != 0) return df_fail("%s: stat failed: %s", label, strerror(errno));
    *size = (uint64_t)st.st_size;
    return 0;
}

int file_open_regular(const char *path) {
    /* O_NONBLOCK: opening a named pipe must not wait for a writer (it is refused below) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return df_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) ? df_fail("%s: stat failed: %s", path, strerror(errno))
             : !S_ISREG(st.st_mode) ? df_fail("%s: not a regular file", path)
             : fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) ? df_fail("%s: fcntl: %s", path, strerror(errno))
                                                                      : 0;
    if (rc) {
        close(fd);
        return -1;
    }
    return fd;
}

int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len) {
    int fd = file_open_regular(path);
    if (fd < 0) return -1;
    uint64_t size;
    int rc = file_size_fd(fd, &size, path);
    if (!rc && size > max_bytes) rc = df_fail("%s: %llu bytes is larger than the %zu-byte limit", path, (unsigned long long)size, max_bytes);
    char *buf = NULL;
    if (!rc) {
        buf = df_malloc((size_t)size + 1);
        rc = file_pread_full(fd, buf, (size_t)size, 0, path);
    }
    close(fd);
    if (rc) {
        free(buf);
        return -1;
    }
    buf[size] = 0;
    *out = buf;
    *len = (size_t)size;
    return 0;
}

int file_pread_full(int fd, void *buf, size_t n, uint64_t offset, const char *label) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return df_fail("%s: read of bytes %llu..%llu failed: %s", label, (unsigned long long)offset,
                           (unsigned long long)(offset + n), strerror(errno));
        if (r == 0)
            return df_fail("%s: file ends before byte %llu (reading %llu..%llu): truncated?", label,
                           (unsigned long long)(offset + done), (unsigned long long)offset,
                           (unsigned long long)(offset + n));
        done += (size_t)r;
    }
    return 0;
}

int file_write_full(int fd, const void *buf, size_t n, const char *label) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return df_fail("%s: write failed: %s", label, strerror(errno));
        done += (size_t)w;
    }
    return 0;
}

/* What `path` names, following one level of symbolic links: 0 with *kind and the resolved
 * target (new string) in *target, or -1 with a message. kind: 'n' nothing there, 'f' regular
 * file, 'w' write-through (FIFO, character device), 'x' anything else. */
static int classify_output(const char *path, char *kind, char **target, struct stat *st) {
    *target = NULL;
    if (lstat(path, st) != 0) {
        if (errno != ENOENT) return df_fail("%s: cannot examine: %s", path, strerror(errno));
        *kind = 'n', *target = df_strdup(path);
        return 0;
    }
    int link = S_ISLNK(st->st_mode);
    if (link && stat(path, st) != 0)
        return df_fail("%s: a symbolic link to a file that cannot be reached: %s", path, strerror(errno));
    int special = S_ISFIFO(st->st_mode) || S_ISCHR(st->st_mode);
    /* /dev/stdout and /proc/self/fd/N are links to whatever the descriptor is (a pipe, a
     * terminal, a file the shell opened): the bytes go to that descriptor */
    if (special || !strncmp(path, "/dev/", 5) || !strncmp(path, "/proc/", 6)) {
        *kind = special || S_ISREG(st->st_mode) ? 'w' : 'x', *target = df_strdup(path);
        return 0;
    }
    if (link) { /* the link stays; the file it points to is replaced */
        char *real = realpath(path, NULL);
        if (!real) return df_fail("%s: cannot resolve the symbolic link: %s", path, strerror(errno));
        *target = df_strdup(real);
        free(real);
    } else {
        *target = df_strdup(path);
    }
    *kind = S_ISREG(st->st_mode) ? 'f' : 'x';
    return 0;
}

static const char *kind_name(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int file_replace_begin(FileReplace *r, const char *path, int direct, int *got_direct) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    char kind;
    struct stat st;
    if (classify_output(path, &kind, &r->target, &st)) return -1;
    if (kind != 'n' && kind != 'f') {
        int rc = df_fail("%s: is %s: refusing to replace it", path,
                         kind == 'w' ? (S_ISFIFO(st.st_mode) ? "a named pipe" : "a character device") : kind_name(st.st_mode));
        free(r->target), r->target = NULL;
        return rc;
    }
    r->keep_mode = kind == 'f', r->mode = (unsigned)(st.st_mode & 07777);
    size_t len = strlen(r->target) + 8;
    r->tmp = df_malloc(len);
    snprintf(r->tmp, len, "%s.tmp", r->target);
    struct stat ts;
    if (lstat(r->tmp, &ts) == 0) {
        if (!S_ISREG(ts.st_mode) && !S_ISLNK(ts.st_mode)) {
            df_fail("%s: exists and is %s: refusing to use it as the temporary file", r->tmp, kind_name(ts.st_mode));
            free(r->target), free(r->tmp), r->target = r->tmp = NULL;
            return -1;
        }
        unlink(r->tmp); /* a leftover of an interrupted write (or a link planted there) */
    }
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    r->fd = direct ? plat_open_uncached(r->tmp, flags, 0644) : -1;
    if (got_direct) *got_direct = r->fd >= 0;
    if (r->fd < 0 && (!direct || errno == EINVAL)) r->fd = open(r->tmp, flags, 0644);
    if (r->fd < 0) {
        df_fail("%s: cannot create: %s", r->tmp, strerror(errno));
        free(r->target), free(r->tmp), r->target = r->tmp = NULL;
        return -1;
    }
    return 0;
}

int file_replace_commit(FileReplace *r) {
    int rc = 0;
    if (r->keep_mode && fchmod(r->fd, (mode_t)r->mode) != 0) rc = df_fail("%s: chmod failed: %s", r->tmp, strerror(errno));
    if (!rc && fsync(r->fd) != 0) rc = df_fail("%s: fsync failed: %s", r->tmp, strerror(errno));
    if (close(r->fd) != 0 && !rc) rc = df_fail("%s: close failed: %s", r->tmp, strerror(errno));
    r->fd = -1;
    if (!rc && rename(r->tmp, r->target) != 0) rc = df_fail("%s: rename failed: %s", r->target, strerror(errno));
    if (rc) unlink(r->tmp);
    free(r->target), free(r->tmp);
    memset(r, 0, sizeof *r);
    r->fd = -1;
    return rc;
}

void file_replace_abort(FileReplace *r) {
    if (r->fd >= 0) close(r->fd);
    if (r->tmp) unlink(r->tmp);
    free(r->target), free(r->tmp);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

/* A FIFO or character device: the bytes go through it, nothing is created or renamed. */
static int write_through(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return df_fail("%s: cannot open for writing: %s", path, strerror(errno));
    int rc = file_write_full(fd, data, n, path);
    if (close(fd) != 0 && !rc) rc = df_fail("%s: close failed: %s", path, strerror(errno));
    return rc;
}

int file_write_atomic(const char *path, const void *data, size_t n) {
    char kind, *target;
    struct stat st;
    if (classify_output(path, &kind, &target, &st)) return -1;
    int rc;
    if (kind == 'w') rc = write_through(target, data, n);
    else if (kind == 'x') rc = df_fail("%s: is %s: refusing to write over it", path, kind_name(st.st_mode));
    else {
        FileReplace r;
        rc = file_replace_begin(&r, target, 0, NULL);
        if (!rc && file_write_full(r.fd, data, n, r.tmp)) {
            file_replace_abort(&r);
            rc = -1;
        } else if (!rc) {
            rc = file_replace_commit(&r);
        }
    }
    free(target);
    return rc;
}

int file_dir_peek(const char *path, int *exists, char *first, size_t len) {
    *exists = 0, first[0] = 0;
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT) return 0;
        return df_fail("%s: cannot open as a directory: %s", path, strerror(errno));
    }
    *exists = 1;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(first, len, "%s", de->d_name);
            break;
        }
    closedir(d);
    return 0;
}

int file_mkdirs(const char *path) {
    char *p = df_strdup(path);
    int rc = 0;
    for (char *s = p + 1; !rc; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = df_fail("%s: cannot create directory: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = df_malloc(n);
    snprintf(s, n, "%s/%s", dir, name);
    return s;
}

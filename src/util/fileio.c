#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

int file_size_fd(int fd, uint64_t *size, const char *label) {
    struct stat st;
    if (fstat(fd, &st) != 0) return df_fail("%s: stat failed: %s", label, strerror(errno));
    *size = (uint64_t)st.st_size;
    return 0;
}

int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return df_fail("%s: cannot open: %s", path, strerror(errno));
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

int file_write_atomic(const char *path, const void *data, size_t n) {
    size_t len = strlen(path) + 16;
    char *tmp = df_malloc(len);
    snprintf(tmp, len, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 ? df_fail("%s: cannot create: %s", tmp, strerror(errno)) : 0;
    if (!rc) rc = file_write_full(fd, data, n, tmp);
    if (!rc && fsync(fd) != 0) rc = df_fail("%s: fsync failed: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && !rc) rc = df_fail("%s: close failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = df_fail("%s: rename failed: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
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

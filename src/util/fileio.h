/* fileio.h - checked file primitives: whole-file reads with a size cap, positional reads that
 * finish or fail with the file and byte range named, and atomic replace-by-rename writes. */
#ifndef DF_FILEIO_H
#define DF_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Reads all of `path` (at most max_bytes) into a new NUL-terminated buffer the caller frees. */
int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len);
/* Reads exactly n bytes at offset; a short read is an error naming `label` and the range. */
int file_pread_full(int fd, void *buf, size_t n, uint64_t offset, const char *label);
/* Writes all n bytes (at the current position). */
int file_write_full(int fd, const void *buf, size_t n, const char *label);
/* Writes `data` to path via path.tmp + fsync + rename, so readers never see a partial file. */
int file_write_atomic(const char *path, const void *data, size_t n);
/* Size of an open file. */
int file_size_fd(int fd, uint64_t *size, const char *label);
/* mkdir -p */
int file_mkdirs(const char *path);
/* Joins dir and name into a new string the caller frees. */
char *path_join(const char *dir, const char *name);

#endif

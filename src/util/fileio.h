/* fileio.h - checked file primitives: whole-file reads with a size cap, positional reads that
 * finish or fail with the file and byte range named, and atomic replace-by-rename writes. */
#ifndef DF_FILEIO_H
#define DF_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Opens an existing regular file for reading (a named pipe, device or directory is refused
 * without blocking); the descriptor, or -1 with a message. */
int file_open_regular(const char *path);
/* Reads all of the regular file `path` (at most max_bytes) into a new NUL-terminated buffer the
 * caller frees. */
int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len);
/* Reads exactly n bytes at offset; a short read is an error naming `label` and the range. */
int file_pread_full(int fd, void *buf, size_t n, uint64_t offset, const char *label);
/* Writes all n bytes (at the current position). */
int file_write_full(int fd, const void *buf, size_t n, const char *label);
/* Writes `data` to the file `path` names, never replacing what is not a file:
 *   a regular file (or nothing yet): via path.tmp + fsync + rename, so readers never see a
 *     partial file; an existing file keeps its permission bits;
 *   a symbolic link: the same for the file it points to (the link stays a link);
 *   a FIFO or character device (/dev/null, /dev/stdout, a named pipe): written through in place;
 *   anything else (a directory, a block device, a socket, a dangling link): refused. */
int file_write_atomic(const char *path, const void *data, size_t n);

/* Replacing one file by a new one written in full (file_write_atomic's regular-file case, for
 * writers that produce the bytes themselves). begin resolves a symbolic link to its target,
 * refuses a target that is not a regular file, and creates target.tmp exclusively (never
 * following a link there; a stale .tmp regular file or link is removed first). direct: try
 * O_DIRECT, falling back to buffered writes where the file system refuses it (*got_direct
 * says which; may be NULL). commit fsyncs, closes and renames over the target; abort closes and
 * removes the temporary. Both free what begin allocated. */
typedef struct {
    char *target;        /* the file being replaced (a link's target) */
    char *tmp;
    int fd;
    int keep_mode;       /* the target existed: its permission bits go to the new file */
    unsigned mode;
} FileReplace;
int file_replace_begin(FileReplace *r, const char *path, int direct, int *got_direct);
int file_replace_commit(FileReplace *r);
void file_replace_abort(FileReplace *r);
/* Size of an open file. */
int file_size_fd(int fd, uint64_t *size, const char *label);
/* What a directory holds: *exists 0 when path does not exist; otherwise first[] receives the
 * name of one entry ("" when it is empty). Fails (with a message) for a path that is not a
 * directory or cannot be read. */
int file_dir_peek(const char *path, int *exists, char *first, size_t len);
/* mkdir -p */
int file_mkdirs(const char *path);
/* Joins dir and name into a new string the caller frees. */
char *path_join(const char *dir, const char *name);

#endif

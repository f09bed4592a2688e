/* input.h - reading a whole input that may not be a regular file (stdin, a pipe, /dev/stdin, a
 * process substitution): bytes are read until the end, never trusting a size fstat reports. */
#ifndef DF_INPUT_H
#define DF_INPUT_H

#include <stddef.h>
#include <stdio.h>

/* All of f (at most max bytes, else an error naming `label`) into a new NUL-terminated buffer. */
int read_stream(FILE *f, const char *label, size_t max, char **out, size_t *len);
/* All of path ("-": stdin), as read_stream. */
int read_input(const char *path, size_t max, char **out, size_t *len);

#endif

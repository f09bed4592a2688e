/* token_list.h - token ids typed by the user (--tokens) or read from a file (--tokens-file). */
#ifndef DF_TOKEN_LIST_H
#define DF_TOKEN_LIST_H

/* Parses whitespace- or comma-separated token ids (at most max), each in 0..vocab-1. Returns the
 * count, or -1 with a message. */
int parse_token_list(const char *text, int *ids, int max, int vocab);
/* Reads a file of whitespace-separated token ids into a new array. Returns the count or -1. */
int read_token_file(const char *path, int **ids, int vocab);

#endif

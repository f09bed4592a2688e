/* strbuf.h - a growable byte string (always NUL-terminated once anything was appended). The
 * owner zero-initialises it ({0}) and releases it with sb_free. */
#ifndef DF_STRBUF_H
#define DF_STRBUF_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

typedef struct {
    char *p;
    size_t n, cap;
} StrBuf;

static inline void sb_add(StrBuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = df_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static inline void sb_adds(StrBuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static inline void sb_free(StrBuf *b) {
    free(b->p);
    *b = (StrBuf){0};
}

#endif

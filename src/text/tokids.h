/* tokids.h - a growable array of token ids, the output of encoding and chat rendering. The
 * caller owns it: zero-initialise ({0}), append, and release with tokids_free. */
#ifndef DF_TOKIDS_H
#define DF_TOKIDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/err.h"

typedef struct {
    int32_t *v;
    size_t n, cap;
} TokIds;

static inline void tokids_reserve(TokIds *t, size_t extra) {
    if (t->n + extra <= t->cap) return;
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->n + extra) cap *= 2;
    t->v = df_realloc(t->v, cap * sizeof *t->v);
    t->cap = cap;
}

static inline void tokids_push(TokIds *t, int32_t id) {
    if (t->n == t->cap) tokids_reserve(t, 1);
    t->v[t->n++] = id;
}

static inline void tokids_free(TokIds *t) {
    free(t->v);
    *t = (TokIds){0};
}

#endif

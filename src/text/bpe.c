#include "text/bpe.h"

#include <stdlib.h>

#define NO_PAIR INT32_MAX

static void reserve(BpeScratch *s, size_t n) {
    if (n <= s->cap) return;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    bpe_scratch_free(s);
    s->nxt = df_malloc(cap * sizeof *s->nxt);
    s->prv = df_malloc(cap * sizeof *s->prv);
    s->pair = df_malloc(cap * sizeof *s->pair);
    s->tok = df_malloc(cap * sizeof *s->tok);
    s->heap = df_malloc(3 * cap * sizeof *s->heap);
    s->cap = cap;
}

void bpe_scratch_free(BpeScratch *s) {
    free(s->nxt), free(s->prv), free(s->pair), free(s->tok), free(s->heap);
    *s = (BpeScratch){0};
}

/* --- a binary min-heap of uint64 keys; smaller key = lower rank, then further left --- */

static void heap_push(uint64_t *h, size_t *n, uint64_t key) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up] <= key) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = key;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], last = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1] < h[c]) c++;
        if (last <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

/* Rank of the pair that starts at part i (the bytes of i and of the part after it). */
static int32_t pair_rank(const RankMap *m, const uint8_t *piece, size_t n, const int32_t *nxt, int32_t i) {
    int32_t j = nxt[i];
    if ((size_t)j >= n) return NO_PAIR;
    size_t end = (size_t)nxt[j];
    int32_t r = rankmap_get(m, piece + i, end - (size_t)i);
    return r < 0 ? NO_PAIR : r;
}

static void set_pair(BpeScratch *s, size_t *hn, int32_t i, int32_t r) {
    s->pair[i] = r;
    if (r != NO_PAIR) heap_push(s->heap, hn, (uint64_t)r << 32 | (uint32_t)i);
}

void bpe_encode(const RankMap *m, const int32_t byte_rank[256], const uint8_t *piece, size_t n,
                BpeScratch *s, TokIds *out) {
    reserve(s, n + 1);
    int32_t *nxt = s->nxt, *prv = s->prv, *tok = s->tok;
    size_t hn = 0;
    /* Parts are identified by their first byte; nxt/prv link the live ones, n ends the list. */
    for (size_t i = 0; i < n; i++) {
        nxt[i] = (int32_t)i + 1, prv[i] = (int32_t)i - 1;
        tok[i] = byte_rank[piece[i]];
    }
    for (size_t i = 0; i < n; i++) set_pair(s, &hn, (int32_t)i, pair_rank(m, piece, n, nxt, (int32_t)i));
    while (hn) {
        uint64_t key = heap_pop(s->heap, &hn);
        int32_t r = (int32_t)(key >> 32), i = (int32_t)(uint32_t)key;
        if (s->pair[i] != r) continue; /* stale: the part changed or died since the push */
        int32_t j = nxt[i], k = nxt[j];
        s->pair[j] = NO_PAIR;
        tok[i] = r;
        nxt[i] = k;
        if ((size_t)k < n) prv[k] = i;
        set_pair(s, &hn, i, pair_rank(m, piece, n, nxt, i));
        if (prv[i] >= 0) set_pair(s, &hn, prv[i], pair_rank(m, piece, n, nxt, prv[i]));
    }
    for (size_t i = 0; i < n; i = (size_t)nxt[i]) tokids_push(out, tok[i]);
}

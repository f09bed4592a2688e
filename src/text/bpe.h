/* bpe.h - byte-level BPE of one pre-tokenised piece (docs/MODEL.md 6.2 step 4), tiktoken's rule:
 * repeatedly merge the adjacent pair whose concatenation has the lowest rank, the leftmost of
 * equal ranks first, until no adjacent pair is a token. A min-heap of (rank, position) with lazy
 * deletion makes a piece of n bytes cost O(n log n), so the 25,000-character runs K3 allows stay
 * fast (tiktoken's scan is quadratic). Scratch memory is the caller's and is reused across
 * pieces: it grows to the longest piece seen and is released with bpe_scratch_free. */
#ifndef DF_BPE_H
#define DF_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "text/rankmap.h"
#include "text/tokids.h"

typedef struct {
    int32_t *nxt, *prv, *pair, *tok; /* per byte position of the piece */
    uint64_t *heap;                  /* (rank << 32 | position), 3 entries per byte */
    size_t cap;                      /* bytes the arrays can hold */
} BpeScratch;

/* Appends the ranks of piece[0..n) (n >= 1) to out. byte_rank[b] is the rank of the single
 * byte b; every byte must have one. */
void bpe_encode(const RankMap *m, const int32_t byte_rank[256], const uint8_t *piece, size_t n,
                BpeScratch *s, TokIds *out);

void bpe_scratch_free(BpeScratch *s);

#endif

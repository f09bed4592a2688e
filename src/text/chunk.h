/* chunk.h - K3's input splitting before pre-tokenisation (docs/MODEL.md 6.2 step 1), as Moonshot's
 * tokenizer wrapper does it: slices of at most 400,000 characters, each cut further so that no
 * run of same-class characters (Python str.isspace() vs not) exceeds 25,000. Each chunk is then
 * encoded as an independent string, so these cuts change token ids and must be reproduced
 * exactly: a cut falls before the character that would make a run 25,001 long, and the run
 * count restarts at 1 there. The iterator only reads the text (valid UTF-8) it is given. */
#ifndef DF_CHUNK_H
#define DF_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#define CHUNK_MAX_CHARS 400000
#define CHUNK_MAX_RUN 25000

typedef struct {
    const uint8_t *s;
    size_t n;
    size_t pos;       /* start of the next chunk */
    size_t scan;      /* next character to classify */
    size_t slice_end; /* end of the current 400k-character slice; == pos when none is open */
    size_t run;       /* length of the current same-class run */
    int run_space;
    size_t max_chars, max_run; /* the limits above; tests shrink them */
} ChunkIter;

void chunk_iter_init(ChunkIter *it, const uint8_t *s, size_t n);

/* Stores the next chunk's byte range and returns 1, or returns 0 when the text is used up
 * (empty text yields no chunk). */
int chunk_next(ChunkIter *it, size_t *start, size_t *len);

#endif

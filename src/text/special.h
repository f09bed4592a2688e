/* special.h - the 256 special tokens: spellings by id, lookup by spelling, and the leftmost
 * special spelling in trusted text. Spellings are unique; when two could match at the same
 * place (one a prefix of the other; K3's never are) the longer wins. The set owns its strings. */
#ifndef DF_SPECIAL_H
#define DF_SPECIAL_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

typedef struct {
    char *spell[TOK_N_SPECIAL];
    size_t len[TOK_N_SPECIAL];
    int32_t first_id;
    uint8_t order[TOK_N_SPECIAL];      /* indices sorted by first byte, then longest first */
    uint16_t bucket[257];              /* order[bucket[b] .. bucket[b+1]) start with byte b */
} SpecialSet;

/* Takes ownership of spell[i] (NUL-terminated, non-empty, unique) for ids first_id + i. */
void special_init(SpecialSet *s, int32_t first_id, char *spell[TOK_N_SPECIAL]);
void special_free(SpecialSet *s);

int32_t special_lookup(const SpecialSet *s, const char *spelling, size_t len);

/* Finds the leftmost special spelling in text[0..n): returns its offset and sets *id, *len;
 * returns n when there is none. */
size_t special_find(const SpecialSet *s, const uint8_t *text, size_t n, int32_t *id, size_t *len);

#endif

#include "text/special.h"

#include <stdlib.h>
#include <string.h>

/* Order for matching: by first byte, then longest first, then by id. */
static int before(const SpecialSet *s, int i, int j) {
    uint8_t ci = (uint8_t)s->spell[i][0], cj = (uint8_t)s->spell[j][0];
    if (ci != cj) return ci < cj;
    if (s->len[i] != s->len[j]) return s->len[i] > s->len[j];
    return i < j;
}

void special_init(SpecialSet *s, int32_t first_id, char *spell[TOK_N_SPECIAL]) {
    s->first_id = first_id;
    for (int i = 0; i < TOK_N_SPECIAL; i++) {
        s->spell[i] = spell[i];
        s->len[i] = strlen(spell[i]);
        s->order[i] = (uint8_t)i;
    }
    for (int i = 1; i < TOK_N_SPECIAL; i++) /* insertion sort: 256 entries, once per load */
        for (int j = i; j > 0 && before(s, s->order[j], s->order[j - 1]); j--) {
            uint8_t t = s->order[j];
            s->order[j] = s->order[j - 1], s->order[j - 1] = t;
        }
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < TOK_N_SPECIAL && (uint8_t)s->spell[s->order[k]][0] < b) k++;
        s->bucket[b] = (uint16_t)k;
    }
}

void special_free(SpecialSet *s) {
    for (int i = 0; i < TOK_N_SPECIAL; i++) free(s->spell[i]);
    memset(s, 0, sizeof *s);
}

int32_t special_lookup(const SpecialSet *s, const char *spelling, size_t len) {
    for (int i = 0; i < TOK_N_SPECIAL; i++)
        if (s->len[i] == len && memcmp(s->spell[i], spelling, len) == 0) return s->first_id + i;
    return -1;
}

size_t special_find(const SpecialSet *s, const uint8_t *text, size_t n, int32_t *id, size_t *len) {
    for (size_t p = 0; p < n; p++) {
        for (int k = s->bucket[text[p]]; k < s->bucket[text[p] + 1]; k++) {
            int i = s->order[k];
            if (s->len[i] <= n - p && memcmp(text + p, s->spell[i], s->len[i]) == 0) {
                *id = s->first_id + i, *len = s->len[i];
                return p;
            }
        }
    }
    return n;
}

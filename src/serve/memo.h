/* memo.h - the exact-request memo: a small LRU map from a request's identity (endpoint, token
 * budget, rendered prompt ids) to the token ids its generation produced and how it ended.
 * Decoding is greedy and deterministic, so replaying the ids reproduces the response. Entries
 * are copied in and out; the memo owns its storage. Thread-safe. Capacity 0 disables it. */
#ifndef DF_MEMO_H
#define DF_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokids.h"

#define MEMO_MAX_ENTRIES 4096

typedef struct Memo Memo;

Memo *memo_new(int entries);
void memo_free(Memo *m);
/* 1 and a copy of the ids (appended to out) when key is present, else 0. */
int memo_get(Memo *m, const int32_t *key, size_t key_n, TokIds *out, int *finish_stop);
void memo_put(Memo *m, const int32_t *key, size_t key_n, const int32_t *ids, size_t n, int finish_stop);

#endif

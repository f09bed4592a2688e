/* constrain_fixture.h - what the constrained-decoding tests share: a small K3-style tokenizer
 * whose vocabulary also holds tokens that straddle every boundary the matcher must get right
 * (a string's closing quote and what follows it, escapes cut anywhere, UTF-8 characters split
 * or ill-formed, number parts, chat-format header text), and random walks that pick among the
 * allowed tokens the way a model with random weights would. */
#ifndef DF_CONSTRAIN_FIXTURE_H
#define DF_CONSTRAIN_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/matcher.h"
#include "text/rankmap.h"
#include "text/strbuf.h"
#include "text/tokenizer.h"
#include "text/vocab_write.h"
#include "tokenizer_fixture.h"
#include "util/rng.h"

static const char *const fixture_tricky_tokens[] = {
    "\"}", "\",\"", "\":", "\":\"", "{\"", "[{\"", "}]", "]}", "},{", "\"]", "\",", "\"},{\"", "\":[", "\":{\"", "[]", "{}",
    "\\", "\\u", "\\u00", "\\u0000", "\\u000", "\\ud8", "\\uD83D", "\\udfff", "\\u00e9", "\\\"", "\\n", "\\x", "\\/",
    "1e", "1E+", "e-", "-0", "0.", ".5", "e-7", "00", "12345678901234", "5678", "0e", "-", "+",
    "null", "null,", "true]", "false}", "tru", "nul", "\"a", "\"b\":", "\"x\"", "\"y\"",
    "\xe2\x82", "\xac\"", "\xac", "\xf0\x9f", "\x98\x80", "\xc3", "\xa9", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90",
    "\xe0\x80", "\t", "\x01", "\x7f", "<|open|>", "argument key=\"", "\" type=\"", "string\"", "number\"",
    "call tool=\"", "\" index=\"", "1\"", "2\"", "think", "response", "message", "tools", "call", "argument",
    "&amp;", "&quot;", "get_", "weather", "lookup", "city", "\xc3\xa9t\xc3\xa9", "caf\xc3\xa9",
};

/* A tokenizer: the synthetic K3-style vocabulary of n_synth tokens plus the tricky ones, K3's
 * special tokens after them. Exits on failure. */
static inline Tokenizer *fixture_tricky(int n_synth) {
    Tokenizer *base = fixture_synth(n_synth, NULL);
    RankMap map;
    rankmap_init(&map);
    for (int id = 0; id < tok_n_mergeable(base); id++) {
        size_t len;
        const uint8_t *b = tok_token_bytes(base, id, &len);
        rankmap_add(&map, b, len, NULL);
    }
    for (size_t k = 0; k < sizeof fixture_tricky_tokens / sizeof *fixture_tricky_tokens; k++)
        rankmap_add(&map, (const uint8_t *)fixture_tricky_tokens[k], strlen(fixture_tricky_tokens[k]), NULL); /* dups skipped */
    const char *dir = fixture_dir();
    if (vocab_write_k3(dir, &map)) {
        fprintf(stderr, "vocab_write_k3: %s\n", df_errmsg());
        exit(2);
    }
    rankmap_free(&map), tok_free(base);
    Tokenizer *t = tok_load(dir);
    if (!t) {
        fprintf(stderr, "tok_load: %s\n", df_errmsg());
        exit(2);
    }
    return t;
}

/* The trie of a tokenizer; exits on failure. */
static inline VocabTrie *fixture_trie(const Tokenizer *tok) {
    VocabTrie *t = vocab_trie_new(tok);
    if (!t) {
        fprintf(stderr, "vocab_trie_new: %s\n", df_errmsg());
        exit(2);
    }
    return t;
}

typedef enum { PICK_UNIFORM, PICK_RANDOM_LOGITS } PickMode;

/* One of the allowed tokens: uniformly, or the best under fresh random logits (a model with
 * random weights decoding greedily). -1 when none is allowed. */
static inline int32_t fixture_pick(const uint64_t *allowed, int n_ids, int n_allowed, Rng *rng, PickMode mode) {
    if (n_allowed <= 0) return -1;
    if (mode == PICK_UNIFORM) {
        int k = (int)(rng_next(rng) % (uint64_t)n_allowed);
        for (int id = 0; id < n_ids; id++)
            if (mask_has(allowed, id) && k-- == 0) return id;
        return -1;
    }
    int32_t best = -1;
    float best_v = 0;
    for (int id = 0; id < n_ids; id++) {
        float v = rng_sym(rng);
        if (mask_has(allowed, id) && (best < 0 || v > best_v)) best = id, best_v = v;
    }
    return best;
}

/* The text of a token sequence with markers spelled out, for messages and parsers. */
static inline void fixture_append_token(const Tokenizer *tok, int32_t id, StrBuf *out) {
    size_t len;
    const uint8_t *b = tok_token_bytes(tok, id, &len);
    sb_add(out, b, len);
}

#endif

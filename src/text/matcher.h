/* matcher.h - constrained decoding: at each step, the set of tokens that keep the output a
 * valid prefix of a Grammar's language, and the state advanced by the token chosen.
 *
 * A token is allowed when its units (its bytes, or the chat marker it is) extend the output to
 * a prefix of some complete match of the grammar. The end of a reply is part of the grammar (a
 * reply grammar ends with <|end_of_msg|>), so the stop token is allowed exactly when everything
 * before it is complete, and nothing is allowed once it has been accepted (matcher_done).
 *
 * Budget. matcher_mask takes the number of tokens that may still be generated, the chosen one
 * included (min(max_tokens left, context left)). It then allows only tokens after which the
 * match can still be completed within the rest of the budget. The count is an upper bound on
 * the fewest tokens: literal text (chat markup, member names, enum values) costs the fewest
 * tokens that spell it, anything else one token per byte (every byte is a token of its own:
 * vocab_trie.h); every step along a cheapest completion lowers it by exactly one. So as long as
 * the first mask's budget was at least matcher_min_tokens, some token is always allowed and
 * the reply always ends, complete, within the budget: close to the limit the mask narrows to
 * tokens that make progress toward the end. With a negative budget no such promise is made (a model may write
 * inside a string forever).
 *
 * Cost. Allowed tokens are found by walking the vocabulary trie with the match state, skipping
 * refused subtrees. What a token does to the innermost frame alone (inside a string, a number,
 * free text, ...) is cached per frame state, so a repeated state costs one bitset copy plus a
 * walk of the few tokens that leave the frame (a string's closing quote). docs/PERFORMANCE.md
 * has the measured cost per step.
 *
 * Ownership: a Matcher borrows its Grammar and VocabTrie (both must outlive it) and owns its
 * state and cache (a few MB at most). One thread at a time per Matcher. */
#ifndef DF_MATCHER_H
#define DF_MATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"
#include "text/vocab_trie.h"

typedef struct Matcher Matcher;

/* A matcher at the start of the grammar. g must have passed grammar_finish, for t or for no
 * vocabulary; NULL with a message when it was finished for another one. */
Matcher *matcher_new(const Grammar *g, const VocabTrie *t);
void matcher_free(Matcher *m);
/* An independent copy of the state (for a second sequence, or to try tokens ahead); the
 * cache is not copied. */
Matcher *matcher_clone(const Matcher *m);

/* Words of the allowed-token bitset: (vocabulary size + 63) / 64. */
size_t matcher_mask_words(const Matcher *m);
static inline int mask_has(const uint64_t *allowed, int32_t id) { return (int)(allowed[id >> 6] >> (id & 63) & 1); }

/* Writes the allowed tokens (bit id of allowed[]) for the next position. budget: tokens that
 * may still be generated, this one included, or < 0 for no limit. Returns the number allowed
 * (0 once done, or when the budget is already too small), or -1 with a message. */
int matcher_mask(Matcher *m, int64_t budget, uint64_t *allowed);

/* 1 when token may come next (the same answer as matcher_mask's bit, for one token: a cheap
 * check of the model's own choice before computing a whole mask). */
int matcher_allows(Matcher *m, int32_t token, int64_t budget);

/* Advances by token. Returns 0, or -1 with a message when the token is not allowed (the state
 * is then unchanged). */
int matcher_accept(Matcher *m, int32_t token);

/* 1 once the grammar's match is complete (its last unit, the stop token, was accepted). */
int matcher_done(const Matcher *m);

/* Fewest tokens that complete the match from here (0 once done). */
uint32_t matcher_min_tokens(const Matcher *m);

/* What the masks so far cost: how many, and how many needed a walk of the whole trie (a frame
 * state not in the cache, or a budget so tight that every token is checked with the whole
 * state). */
typedef struct {
    uint64_t masks, cache_walks, tight_walks;
} MatcherStats;
MatcherStats matcher_stats(const Matcher *m);

#endif

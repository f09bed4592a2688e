/* vocab_trie.h - a tokenizer's vocabulary as a byte trie, for computing which tokens a grammar
 * allows next without testing every token on its own: a walk steps the grammar once per trie
 * node and skips a whole subtree as soon as its prefix is refused.
 *
 * Nodes are stored in depth-first preorder (children in byte order), so a subtree is a
 * contiguous index range [i, end[i]) and a walk is one forward pass that jumps over refused
 * subtrees. Node 0 is the root (the empty prefix). Special tokens are not in the trie: the four
 * chat markers are units of their own (grammar.h), every other special token is never allowed.
 *
 * Built once per tokenizer (a fraction of a second for K3's 163,840 tokens), immutable after:
 * any number of matchers on any threads may share it. */
#ifndef DF_VOCAB_TRIE_H
#define DF_VOCAB_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"
#include "text/tokenizer.h"

typedef struct VocabTrie {
    uint32_t n_nodes;
    uint8_t *byte;     /* [n_nodes] the byte that leads to the node (root: 0) */
    uint16_t *depth;   /* [n_nodes] prefix length (root: 0) */
    uint32_t *end;     /* [n_nodes] one past the node's subtree */
    uint32_t *parent;  /* [n_nodes] (root: 0) */
    int32_t *token;    /* [n_nodes] a token whose bytes are this prefix, or -1 */
    int32_t *same;     /* [n_ids] the next token with the same bytes, or -1 */
    uint32_t *node_of; /* [n_ids] the node a token's bytes lead to; 0 for tokens not in the trie */
    int n_ids;         /* vocabulary size: token ids are 0..n_ids-1 */
    uint32_t max_len;  /* longest token, in bytes */
    int32_t marker[GM_N]; /* token id of each chat marker, or -1 */
    uint32_t root_child[256]; /* node of each single byte */
} VocabTrie;

/* The trie of a loaded tokenizer: its mergeable tokens, and its chat markers by spelling.
 * NULL with a message when a single byte has no token of its own (the matcher's promise that
 * a reply can always be finished within its token budget rests on every byte being a token). */
VocabTrie *vocab_trie_new(const Tokenizer *tok);

/* The same from a list: token i has bytes[i][0..lens[i]); is_special[i] keeps it out of the
 * trie (NULL: none is special); marker[m] is the id of chat marker m or -1. */
VocabTrie *vocab_trie_build(int n_ids, const uint8_t *const *bytes, const size_t *lens, const uint8_t *is_special,
                            const int32_t marker[GM_N]);

void vocab_trie_free(VocabTrie *t);

/* cost[k] = the fewest tokens that spell u[k..n) (a marker unit is one token), for k = 0..n. */
void vocab_trie_spell(const VocabTrie *t, const GUnit *u, uint32_t n, uint32_t *cost);

/* The bytes of the prefix of node i, written to out (room for t->max_len); returns the length. */
size_t vocab_trie_prefix(const VocabTrie *t, uint32_t i, uint8_t *out);

#endif

/* vocab_trie.c - building the preorder byte trie of a vocabulary (see vocab_trie.h): the
 * tokens are sorted by their bytes, then each token adds the nodes of the bytes it does not
 * share with the one before it, which numbers the nodes in preorder. */
#include "text/vocab_trie.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define TRIE_MAX_TOKEN 65535 /* depth is 16 bits */

typedef struct {
    const uint8_t *b;
    size_t n;
    int32_t id;
} TokRef;

static int tokref_cmp(const void *x, const void *y) {
    const TokRef *a = x, *b = y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = n ? memcmp(a->b, b->b, n) : 0;
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static void add_node(VocabTrie *t, uint32_t *cap, uint8_t byte, uint16_t depth, uint32_t parent) {
    if (t->n_nodes == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        t->byte = df_realloc(t->byte, *cap);
        t->depth = df_realloc(t->depth, *cap * sizeof *t->depth);
        t->end = df_realloc(t->end, *cap * sizeof *t->end);
        t->parent = df_realloc(t->parent, *cap * sizeof *t->parent);
        t->token = df_realloc(t->token, *cap * sizeof *t->token);
    }
    uint32_t i = t->n_nodes++;
    t->byte[i] = byte, t->depth[i] = depth, t->parent[i] = parent, t->token[i] = -1, t->end[i] = 0;
}

VocabTrie *vocab_trie_build(int n_ids, const uint8_t *const *bytes, const size_t *lens, const uint8_t *is_special,
                            const int32_t marker[GM_N]) {
    TokRef *refs = df_malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *refs);
    size_t n = 0;
    int have_byte[256] = {0};
    for (int i = 0; i < n_ids; i++) {
        if ((is_special && is_special[i]) || lens[i] == 0) continue;
        if (lens[i] > TRIE_MAX_TOKEN) {
            free(refs);
            df_fail("token %d is %zu bytes long (at most %d)", i, lens[i], TRIE_MAX_TOKEN);
            return NULL;
        }
        if (lens[i] == 1) have_byte[bytes[i][0]] = 1;
        refs[n++] = (TokRef){bytes[i], lens[i], i};
    }
    for (int b = 0; b < 256; b++)
        if (!have_byte[b]) {
            free(refs);
            df_fail("the vocabulary has no token for the single byte 0x%02x (constrained decoding needs all 256)", b);
            return NULL;
        }
    qsort(refs, n, sizeof *refs, tokref_cmp);
    VocabTrie *t = df_calloc(1, sizeof *t);
    t->n_ids = n_ids;
    t->same = df_malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *t->same);
    t->node_of = df_calloc((size_t)(n_ids > 0 ? n_ids : 1), sizeof *t->node_of);
    for (int i = 0; i < n_ids; i++) t->same[i] = -1;
    memcpy(t->marker, marker, sizeof t->marker);
    size_t longest = 0;
    for (size_t k = 0; k < n; k++)
        if (refs[k].n > longest) longest = refs[k].n;
    uint32_t cap = 0, *path = df_malloc((longest + 1) * sizeof *path); /* path[d]: node of the prefix of length d */
    add_node(t, &cap, 0, 0, 0);
    path[0] = 0;
    size_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (size_t k = 0; k < n; k++) {
        size_t lcp = 0;
        while (prev && lcp < prev_len && lcp < refs[k].n && prev[lcp] == refs[k].b[lcp]) lcp++;
        for (size_t d = prev_len; d > lcp; d--) t->end[path[d]] = t->n_nodes; /* subtrees left behind */
        for (size_t d = lcp; d < refs[k].n; d++) {
            add_node(t, &cap, refs[k].b[d], (uint16_t)(d + 1), path[d]);
            path[d + 1] = t->n_nodes - 1;
        }
        uint32_t node = path[refs[k].n];
        t->node_of[refs[k].id] = node;
        if (t->token[node] < 0) t->token[node] = refs[k].id;
        else { /* equal bytes: chain the later id after the first */
            int32_t at = t->token[node];
            while (t->same[at] >= 0) at = t->same[at];
            t->same[at] = refs[k].id;
        }
        if (refs[k].n > t->max_len) t->max_len = (uint32_t)refs[k].n;
        prev = refs[k].b, prev_len = refs[k].n;
    }
    for (size_t d = prev_len; d > 0; d--) t->end[path[d]] = t->n_nodes;
    t->end[0] = t->n_nodes;
    for (uint32_t c = 1; c < t->n_nodes; c = t->end[c]) t->root_child[t->byte[c]] = c;
    free(refs), free(path);
    return t;
}

VocabTrie *vocab_trie_new(const Tokenizer *tok) {
    int n = tok_vocab_size(tok);
    const uint8_t **bytes = df_malloc((size_t)n * sizeof *bytes);
    size_t *lens = df_malloc((size_t)n * sizeof *lens);
    uint8_t *special = df_malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        bytes[i] = tok_token_bytes(tok, i, &lens[i]);
        special[i] = (uint8_t)tok_is_special(tok, i);
    }
    static const char *const spell[GM_N] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    int32_t marker[GM_N];
    for (int m = 0; m < GM_N; m++) marker[m] = tok_special_id(tok, spell[m]);
    VocabTrie *t = vocab_trie_build(n, bytes, lens, special, marker);
    free(bytes), free(lens), free(special);
    return t;
}

void vocab_trie_free(VocabTrie *t) {
    if (!t) return;
    free(t->byte), free(t->depth), free(t->end), free(t->parent), free(t->token), free(t->same), free(t->node_of);
    free(t);
}

/* The child of node i for byte b, or 0 (children are the subtrees following i in preorder). */
static uint32_t child(const VocabTrie *t, uint32_t i, uint8_t b) {
    if (i == 0) return t->root_child[b];
    for (uint32_t c = i + 1; c < t->end[i]; c = t->end[c])
        if (t->byte[c] == b) return c;
    return 0;
}

void vocab_trie_spell(const VocabTrie *t, const GUnit *u, uint32_t n, uint32_t *cost) {
    cost[n] = 0;
    for (uint32_t k = n; k-- > 0;) {
        cost[k] = 1 + cost[k + 1]; /* the unit alone: a marker, or the byte's own token */
        if (GU_IS_MARKER(u[k])) continue;
        uint32_t node = 0;
        for (uint32_t j = k; j < n && !GU_IS_MARKER(u[j]) && (node = child(t, node, (uint8_t)u[j])); j++)
            if (t->token[node] >= 0 && 1 + cost[j + 1] < cost[k]) cost[k] = 1 + cost[j + 1];
    }
}

size_t vocab_trie_prefix(const VocabTrie *t, uint32_t i, uint8_t *out) {
    size_t n = t->depth[i];
    for (size_t d = n; d > 0; d--, i = t->parent[i]) out[d - 1] = t->byte[i];
    return n;
}

/* fuzz_jsonschema - libFuzzer target for the structured-output compiler and matcher.
 *
 * The input's first byte picks what the rest is (after JSON parsing): a response_format schema
 * (strict or not), a tools array with tool_choice "required", or a whole response_format
 * object. Whatever compiles is then walked for up to 48 tokens on a small built-in vocabulary,
 * taking the allowed token the input's remaining bytes point at, with a budget, so masks, the
 * cache, the budget arithmetic and the state advance all run on hostile grammars. Crashes,
 * sanitizer reports, leaks and hangs are findings; refusals are not.
 *
 * Built by `make fuzz` (build-fuzz/fuzz/fuzz_jsonschema); `tests/fuzz/run.sh 60 jsonschema` runs it for a minute
 * from tests/fuzz/corpus/jsonschema (docs/FUZZING.md). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/matcher.h"
#include "text/reply_grammar.h"
#include "util/err.h"

static VocabTrie *trie;

/* The 256 bytes, some JSON- and chat-shaped tokens, and the four markers as special ids. */
static VocabTrie *small_vocab(void) {
    static const char *const words[] = {"\"", "\":", "\",\"", "{\"", "\"}", "}", "]", "[", ",", "null", "true", "false",
                                        "0", "12", "-", "1e", ".5", "\\u00", "\\ud8", "\\", "\xc3\xa9", "\xe2\x82",
                                        "\xac", "argument key=\"", "\" type=\"", "string\"", "call tool=\"", "\" index=\"",
                                        "1\"", "think", "response", "tools", "message", "call", "argument", "a", "ab"};
    enum { N_WORDS = sizeof words / sizeof *words, N = 256 + N_WORDS + 4 };
    static uint8_t singles[256];
    const uint8_t *bytes[N];
    size_t lens[N];
    uint8_t special[N] = {0};
    for (int b = 0; b < 256; b++) singles[b] = (uint8_t)b, bytes[b] = &singles[b], lens[b] = 1;
    for (int i = 0; i < N_WORDS; i++) bytes[256 + i] = (const uint8_t *)words[i], lens[256 + i] = strlen(words[i]);
    int32_t markers[GM_N];
    for (int m = 0; m < GM_N; m++) {
        int id = 256 + N_WORDS + m;
        bytes[id] = (const uint8_t *)"<special>", lens[id] = 9, special[id] = 1, markers[m] = id;
    }
    return vocab_trie_build(N, bytes, lens, special, markers);
}

static void walk(const Grammar *g, const uint8_t *choices, size_t n) {
    Matcher *m = matcher_new(g, trie);
    uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
    int64_t budget = 48;
    for (int64_t k = 0; k < budget && !matcher_done(m); k++) {
        int allowed = matcher_mask(m, budget - k, bits);
        if (allowed <= 0) break;
        int want = n ? choices[k % (int64_t)n] % allowed : 0;
        int32_t id = -1;
        for (int32_t t = 0; t < trie->n_ids && id < 0; t++)
            if (mask_has(bits, t) && want-- == 0) id = t;
        if (!matcher_allows(m, id, budget - k) || matcher_accept(m, id)) abort(); /* mask and state disagree */
    }
    if (!matcher_done(m) && matcher_min_tokens(m) == 0) abort();
    free(bits);
    matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!trie && !(trie = small_vocab())) abort();
    if (size < 1) return 0;
    uint8_t mode = data[0];
    json_t *j = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, NULL);
    if (!j) return 0;
    Grammar *g = NULL;
    if (mode % 3 == 0) json_grammar(j, mode & 4, "schema", mode & 32 ? trie : NULL, &g);
    else {
        json_t *required = json_string("required");
        ReplySpec spec = {mode & 32 ? trie : NULL, mode % 3 == 2 ? j : NULL, mode % 3 == 1 ? j : NULL, mode % 3 == 1 ? required : NULL, mode & 8 ? 0 : 1,
                          mode & 16 ? 1 : 0};
        reply_grammar(&spec, &g);
        json_decref(required);
    }
    if (g) walk(g, data, size);
    grammar_free(g);
    json_decref(j);
    df_errclear();
    return 0;
}

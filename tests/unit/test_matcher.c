/* Constrained decoding of JSON values: every allowed token keeps the output a valid prefix and
 * every refused one does not (checked token by token against an independent oracle), the stop
 * token is allowed exactly when the value is complete, walks that pick among allowed tokens
 * finish within their token budget with text that parses and validates, the budget's count of
 * tokens left is exact, and the cached masks equal freshly computed ones. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "constrain_fixture.h"
#include "schema_oracle.h"
#include "text/reply_grammar.h"

static Tokenizer *tok;
static VocabTrie *trie;
static int32_t eom;

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"c\":{\"type\":\"null\"},"
    "\"d\":{\"type\":\"string\",\"maxLength\":2}},\"required\":[\"c\"]}",
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},"
    "{\"type\":\"null\"}]},\"minItems\":1,\"maxItems\":3}",
    "{\"enum\":[\"red\",\"green\",\"gr\\\"een\",1,12,1.5,null,true,[1,2],{\"k\":\"v\"}]}",
    "{\"type\":[\"string\",\"null\",\"integer\"],\"minLength\":2}",
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
    "\"required\":[\"kind\",\"x\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},"
    "\"required\":[\"kind\"]}]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
    "{}",
    "{\"type\":\"object\",\"properties\":{\"q\\\"k\\u0001\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},"
    "\"\\u00e9\":{\"type\":\"number\"}},\"required\":[\"q\\\"k\\u0001\"]}",
    "{\"type\":[\"array\",\"integer\"],\"items\":{\"$ref\":\"#\"},\"maxItems\":2}",
    "{\"type\":\"array\",\"items\":false}",
};
#define N_SCHEMAS (sizeof schemas / sizeof *schemas)

static json_t *load(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) {
        fprintf(stderr, "test schema does not parse: %s\n", e.text);
        exit(2);
    }
    return j;
}

/* The grammar of a schema, its lengths counted in the fixture vocabulary's tokens (or one
 * token per unit with vocab NULL). */
static Grammar *grammar_in(const json_t *schema, const VocabTrie *vocab) {
    Grammar *g;
    if (json_grammar(schema, 0, "schema", vocab, &g)) {
        fprintf(stderr, "json_grammar: %s\n", df_errmsg());
        exit(2);
    }
    return g;
}

/* A test schema compiled, with the fewest tokens a value of it takes. */
typedef struct {
    json_t *schema;
    Grammar *g;
    int64_t least;
} Compiled;

static Compiled compiled_in(size_t s, const VocabTrie *vocab) {
    Compiled c = {load(schemas[s]), NULL, 0};
    c.g = grammar_in(c.schema, vocab);
    Matcher *m = matcher_new(c.g, vocab ? vocab : trie);
    c.least = matcher_min_tokens(m);
    matcher_free(m);
    return c;
}

static Compiled compiled(size_t s) { return compiled_in(s, trie); }

static void compiled_free(Compiled *c) {
    grammar_free(c->g);
    json_decref(c->schema);
}

/* What the oracle says of token id after prefix: 1 allowed, 0 not. */
static int oracle_allows(const json_t *schema, const StrBuf *prefix, int32_t id, StrBuf *scratch) {
    int complete;
    if (tok_is_special(tok, id)) {
        orc_check(schema, OT_ALL, (const uint8_t *)prefix->p, (int)prefix->n, &complete);
        return id == eom && complete;
    }
    scratch->n = 0;
    sb_add(scratch, prefix->p ? prefix->p : "", prefix->n);
    fixture_append_token(tok, id, scratch);
    return orc_check(schema, OT_ALL, (const uint8_t *)scratch->p, (int)scratch->n, &complete);
}

/* Compares a mask with the oracle for every token; reports the first difference. */
static int mask_agrees(const json_t *schema, const StrBuf *prefix, const uint64_t *bits, const char *what) {
    StrBuf scratch = {0};
    int ok = 1;
    for (int32_t id = 0; id < tok_vocab_size(tok) && ok; id++) {
        int want = oracle_allows(schema, prefix, id, &scratch);
        if (mask_has(bits, id) != want) {
            size_t len;
            const uint8_t *b = tok_token_bytes(tok, id, &len);
            CHECK_MSG(0, "%s: after '%s' token %d '%.*s': mask %d, oracle %d", what, prefix->p ? prefix->p : "", id,
                      (int)len, (const char *)b, mask_has(bits, id), want);
            ok = 0;
        }
    }
    sb_free(&scratch);
    return ok;
}

static void masks_match_the_oracle_token_by_token(void) {
    uint64_t *bits = NULL;
    for (size_t s = 0; s < N_SCHEMAS; s++) {
        Compiled c = compiled(s);
        for (int walk = 0; walk < 3; walk++) {
            Rng rng;
            rng_seed(&rng, 100 * s + walk);
            Matcher *m = matcher_new(c.g, trie);
            bits = realloc(bits, matcher_mask_words(m) * sizeof *bits);
            StrBuf prefix = {0};
            sb_add(&prefix, "", 0);
            char what[64];
            snprintf(what, sizeof what, "schema %zu walk %d", s, walk);
            for (int step = 0; step < 24 && !matcher_done(m); step++) {
                int n = matcher_mask(m, -1, bits);
                if (!mask_agrees(c.schema, &prefix, bits, what)) break;
                int32_t id = fixture_pick(bits, tok_vocab_size(tok), n, &rng, walk ? PICK_RANDOM_LOGITS : PICK_UNIFORM);
                CHECK(id >= 0 && matcher_allows(m, id, -1) && matcher_accept(m, id) == 0);
                if (id != eom) fixture_append_token(tok, id, &prefix);
            }
            sb_free(&prefix);
            matcher_free(m);
        }
        compiled_free(&c);
    }
    free(bits);
}

/* Walks a matcher to its end within budget; returns the text (without the stop token) or NULL
 * if it did not finish. Checks the cache against a fresh clone and matcher_allows as it goes. */
static char *walk(const Grammar *g, int64_t budget, uint64_t seed, PickMode mode, int single_bytes, int *steps) {
    Rng rng;
    rng_seed(&rng, seed);
    Matcher *m = matcher_new(g, trie);
    size_t words = matcher_mask_words(m);
    uint64_t *bits = malloc(words * sizeof *bits), *fresh_bits = malloc(words * sizeof *bits);
    StrBuf out = {0};
    sb_add(&out, "", 0);
    int k;
    for (k = 0; k < budget && !matcher_done(m); k++) {
        int n = matcher_mask(m, budget - k, bits);
        if (single_bytes) { /* only one-byte tokens and the markers */
            n = 0;
            for (int32_t id = 0; id < tok_vocab_size(tok); id++) {
                size_t len;
                tok_token_bytes(tok, id, &len);
                if (mask_has(bits, id) && len != 1 && !tok_is_special(tok, id)) bits[id >> 6] &= ~(1ull << (id & 63));
                n += mask_has(bits, id);
            }
        }
        if (k % 5 == 2) {
            Matcher *c = matcher_clone(m);
            CHECK(matcher_mask(c, budget - k, fresh_bits) >= 0);
            if (!single_bytes) CHECK_MSG(!memcmp(bits, fresh_bits, words * sizeof *bits), "cached mask differs at step %d", k);
            matcher_free(c);
        }
        int32_t id = fixture_pick(bits, tok_vocab_size(tok), n, &rng, mode);
        if (id < 0) break;
        CHECK(matcher_allows(m, id, budget - k));
        CHECK(matcher_accept(m, id) == 0);
        if (id != eom) fixture_append_token(tok, id, &out);
    }
    int done = matcher_done(m);
    if (done) CHECK(matcher_mask(m, 1, bits) == 0); /* nothing after the end */
    *steps = k;
    matcher_free(m);
    free(bits), free(fresh_bits);
    if (!done) {
        sb_free(&out);
        return NULL;
    }
    return out.p;
}

static void walks_finish_valid_within_their_budget(void) {
    for (size_t s = 0; s < N_SCHEMAS; s++) {
        Compiled c = compiled(s);
        int64_t budgets[] = {c.least, c.least + 1, c.least + 7, 48, 300};
        for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++)
            for (int mode = 0; mode < 2; mode++) {
                int steps;
                char *text = walk(c.g, budgets[b], 7 * s + b + 1000 * mode, (PickMode)mode, 0, &steps);
                CHECK_MSG(text, "schema %zu: no complete value within %lld tokens", s, (long long)budgets[b]);
                if (!text) continue;
                json_error_t e;
                json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
                CHECK_MSG(v, "schema %zu: jansson cannot parse '%s': %s", s, text, e.text);
                int complete;
                orc_check(c.schema, OT_ALL, (const uint8_t *)text, (int)strlen(text), &complete);
                CHECK_MSG(complete, "schema %zu: '%s' is not valid", s, text);
                json_decref(v);
                free(text);
            }
        compiled_free(&c);
    }
}

/* Counted one token per unit, with a budget of exactly matcher_min_tokens and only one-byte
 * tokens, a walk takes exactly that many tokens: the count is neither short (the walk would be
 * stuck) nor long (it would finish early). Counted in the vocabulary's tokens (literals cost
 * their cheapest spelling), the count is smaller and a walk of any allowed tokens still always
 * finishes within it. */
static void tokens_left_are_counted_exactly(void) {
    for (size_t s = 0; s < N_SCHEMAS; s++) {
        Compiled units = compiled_in(s, NULL), tokens = compiled(s);
        CHECK(tokens.least <= units.least);
        for (int seed = 0; seed < 4; seed++) {
            int steps;
            char *text = walk(units.g, units.least, 31 * s + seed, PICK_UNIFORM, 1, &steps);
            CHECK_MSG(text && steps == units.least, "schema %zu: %s after %d units, budget %lld", s,
                      text ? "done" : "stuck", steps, (long long)units.least);
            free(text);
            text = walk(tokens.g, tokens.least, 31 * s + seed, seed & 1 ? PICK_RANDOM_LOGITS : PICK_UNIFORM, 0, &steps);
            CHECK_MSG(text, "schema %zu: stuck after %d tokens, budget %lld", s, steps, (long long)tokens.least);
            free(text);
        }
        compiled_free(&units), compiled_free(&tokens);
    }
}

/* With a budget, a token is allowed exactly when it is allowed without one and the match can
 * still be completed in the tokens left after it (checked by taking each token on a copy). */
static void budget_masks_keep_exactly_what_can_still_finish(void) {
    for (size_t s = 0; s < N_SCHEMAS; s++) {
        Compiled c = compiled(s);
        Matcher *m = matcher_new(c.g, trie);
        size_t words = matcher_mask_words(m);
        uint64_t *free_bits = malloc(words * sizeof *free_bits), *bits = malloc(words * sizeof *bits);
        Rng rng;
        rng_seed(&rng, 77 + s);
        for (int step = 0; step < 30 && !matcher_done(m); step++) {
            int64_t least = matcher_min_tokens(m), budget = least + (int64_t)(rng_next(&rng) % 4);
            int n = matcher_mask(m, -1, free_bits);
            CHECK(matcher_mask(m, budget, bits) > 0);
            for (int32_t id = 0; id < tok_vocab_size(tok); id++) {
                int want = 0;
                if (mask_has(free_bits, id)) {
                    Matcher *copy = matcher_clone(m);
                    want = matcher_accept(copy, id) == 0 && (int64_t)matcher_min_tokens(copy) <= budget - 1;
                    matcher_free(copy);
                }
                if (mask_has(bits, id) != want) {
                    CHECK_MSG(0, "schema %zu step %d budget %lld (least %lld): token %d mask %d, want %d", s, step,
                              (long long)budget, (long long)least, id, mask_has(bits, id), want);
                    break;
                }
            }
            /* go on with any allowed token, the budget forgotten, so states far from the end occur too */
            int32_t id = fixture_pick(free_bits, tok_vocab_size(tok), n, &rng, PICK_UNIFORM);
            CHECK(id >= 0 && matcher_accept(m, id) == 0);
        }
        free(free_bits), free(bits);
        matcher_free(m);
        compiled_free(&c);
    }
}

/* Byte by byte: characters split across tokens, and every ill-formed sequence refused. */
static int accepts_bytes(Matcher *m, const char *bytes) {
    for (const char *p = bytes; *p; p++)
        if (matcher_accept(m, (unsigned char)*p)) return 0; /* ranks 0..255 are the single bytes */
    return 1;
}

static void strings_take_utf8_only_and_the_escape_policy(void) {
    json_t *schema = load("{\"type\":\"string\"}");
    Grammar *g = grammar_in(schema, trie);
    static const struct {
        const char *text;
        int ok;
    } cases[] = {
        {"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 1}, /* é € 😀 split into single bytes */
        {"\"\xc3(", 0},                                  /* a missing continuation byte */
        {"\"\xc0\xaf", 0},                               /* overlong */
        {"\"\xed\xa0\x80", 0},                           /* a surrogate half as UTF-8 */
        {"\"\xf4\x90", 0},                               /* beyond U+10FFFF */
        {"\"\xe0\x80", 0},                               /* overlong three-byte */
        {"\"\x80", 0},                                   /* a lone continuation byte */
        {"\"a\nb", 0},                                   /* a raw control character */
        {"\"\\ud8", 0},                                  /* \u escape of a surrogate half */
        {"\"\\u0000", 0},                                /* \u0000 (jansson refuses it) */
        {"\"\\u00e9\\n\\/\"", 1},
        {"\"\\x", 0},
        {"\"\x7f\"", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Matcher *m = matcher_new(g, trie);
        CHECK_MSG(accepts_bytes(m, cases[i].text) == cases[i].ok, "case %zu", i);
        matcher_free(m);
    }
    grammar_free(g);
    json_decref(schema);
}

/* The stop token is refused until the value is complete, then it is the only way on. */
/* A literal costs the fewest tokens that spell it; markers are one token each. */
static void literals_cost_their_cheapest_spelling(void) {
    static const char *const words[] = {"ab", "abc", "cd", "abcde"};
    enum { N = 256 + 4 + 1 };
    static uint8_t singles[256];
    const uint8_t *bytes[N];
    size_t lens[N];
    uint8_t special[N] = {0};
    for (int b = 0; b < 256; b++) singles[b] = (uint8_t)b, bytes[b] = &singles[b], lens[b] = 1;
    for (int i = 0; i < 4; i++) bytes[256 + i] = (const uint8_t *)words[i], lens[256 + i] = strlen(words[i]);
    bytes[260] = (const uint8_t *)"<m>", lens[260] = 3, special[260] = 1;
    int32_t markers[GM_N] = {260, -1, -1, -1};
    VocabTrie *t = vocab_trie_build(N, bytes, lens, special, markers);
    GUnit u[] = {'a', 'b', 'c', 'd', GU_MARKER(GM_OPEN), 'a', 'b', 'c', 'd', 'e', 'x'};
    uint32_t cost[12];
    vocab_trie_spell(t, u, 11, cost);
    /* abcd = ab+cd (2), the marker (1), abcde (1), x (1); from 'c': cd (1) */
    CHECK_MSG(cost[0] == 5 && cost[2] == 4 && cost[4] == 3 && cost[5] == 2 && cost[10] == 1 && cost[11] == 0,
              "%u %u %u %u %u %u", cost[0], cost[2], cost[4], cost[5], cost[10], cost[11]);
    vocab_trie_free(t);
}

/* A grammar counted in one vocabulary's tokens is refused for another. */
static void a_grammar_serves_the_vocabulary_it_was_counted_for(void) {
    const char *dir;
    Tokenizer *other = fixture_synth(300, &dir);
    VocabTrie *t = fixture_trie(other);
    Compiled c = compiled(0);
    CHECK(matcher_new(c.g, t) == NULL && strstr(df_errmsg(), "another vocabulary"));
    Compiled any = compiled_in(0, NULL); /* counted per unit: any vocabulary */
    Matcher *m = matcher_new(any.g, t);
    CHECK(m != NULL);
    matcher_free(m);
    compiled_free(&c), compiled_free(&any);
    vocab_trie_free(t);
    tok_free(other);
}

static void the_stop_token_comes_exactly_at_the_end(void) {
    json_t *schema = load("{\"type\":\"integer\"}");
    Grammar *g = grammar_in(schema, trie);
    Matcher *m = matcher_new(g, trie);
    uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
    matcher_mask(m, -1, bits);
    CHECK(!mask_has(bits, eom) && mask_has(bits, '-') && mask_has(bits, '7'));
    CHECK(accepts_bytes(m, "-"));
    matcher_mask(m, -1, bits);
    CHECK(!mask_has(bits, eom) && !mask_has(bits, '-'));
    CHECK(accepts_bytes(m, "12"));
    matcher_mask(m, -1, bits);
    CHECK(mask_has(bits, eom) && mask_has(bits, '3') && !mask_has(bits, '.'));
    CHECK(matcher_min_tokens(m) == 1);
    matcher_mask(m, 1, bits); /* one token left: only the stop */
    CHECK(mask_has(bits, eom) && !mask_has(bits, '3'));
    CHECK(matcher_accept(m, eom) == 0 && matcher_done(m));
    CHECK(matcher_accept(m, '1') == -1);
    CHECK(matcher_accept(m, tok_vocab_size(tok)) == -1);
    free(bits);
    matcher_free(m);
    grammar_free(g);
    json_decref(schema);
}

/* On the K3-sized synthetic vocabulary (163,584 tokens): walks end valid within budget. */
static void k3_sized_vocabulary_walks_validate(void) {
    const char *dir;
    Tokenizer *big = fixture_synth(163584, &dir);
    VocabTrie *t = fixture_trie(big);
    int32_t stop = tok_special_id(big, "<|end_of_msg|>");
    for (size_t s = 0; s < N_SCHEMAS; s += 3) {
        Compiled c = compiled_in(s, t);
        Matcher *m = matcher_new(c.g, t);
        uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
        Rng rng;
        rng_seed(&rng, s);
        StrBuf out = {0};
        sb_add(&out, "", 0);
        int budget = (int)c.least + 60;
        for (int k = 0; k < budget && !matcher_done(m); k++) {
            int n = matcher_mask(m, budget - k, bits);
            if (k % 20 == 3) { /* the trie walk and its cache agree with stepping each token directly */
                int32_t bad = -1;
                for (int32_t id = 0; id < tok_vocab_size(big) && bad < 0; id++)
                    if (matcher_allows(m, id, budget - k) != mask_has(bits, id)) bad = id;
                CHECK_MSG(bad < 0, "schema %zu step %d: token %d", s, k, bad);
            }
            int32_t id = fixture_pick(bits, tok_vocab_size(big), n, &rng, PICK_RANDOM_LOGITS);
            CHECK(id >= 0 && matcher_accept(m, id) == 0);
            if (id >= 0 && id != stop) fixture_append_token(big, id, &out);
        }
        int complete;
        orc_check(c.schema, OT_ALL, (const uint8_t *)out.p, (int)out.n, &complete);
        CHECK_MSG(matcher_done(m) && complete, "schema %zu: '%s'", s, out.p);
        sb_free(&out);
        free(bits);
        matcher_free(m);
        compiled_free(&c);
    }
    vocab_trie_free(t);
    tok_free(big);
}

int main(void) {
    tok = fixture_tricky(700);
    trie = fixture_trie(tok);
    eom = tok_special_id(tok, "<|end_of_msg|>");
    RUN(masks_match_the_oracle_token_by_token);
    RUN(walks_finish_valid_within_their_budget);
    RUN(tokens_left_are_counted_exactly);
    RUN(budget_masks_keep_exactly_what_can_still_finish);
    RUN(strings_take_utf8_only_and_the_escape_policy);
    RUN(the_stop_token_comes_exactly_at_the_end);
    RUN(literals_cost_their_cheapest_spelling);
    RUN(a_grammar_serves_the_vocabulary_it_was_counted_for);
    RUN(k3_sized_vocabulary_walks_validate);
    vocab_trie_free(trie);
    tok_free(tok);
    fixture_cleanup();
    return check_summary();
}

/* fuzz_tools.c - libFuzzer harness for tool definitions: a request's tools, tool_choice and
 * parallel_tool_calls as the chat endpoint gets them, compiled into the reply's grammar
 * (text/reply_grammar.h) and a reply walked through it and parsed back (text/xtml.h).
 *
 * What must hold for every input:
 *  - a tool definition is judged the same way whatever tool_choice says: when one choice
 *    (auto, none, required, the input's own) refuses the tools with a message about them
 *    ("tools..."), every other choice refuses them with the same message;
 *  - a reply walked through the grammar (the input's remaining bytes pick among the allowed
 *    tokens, within a budget) ends complete within its budget, and parsed back, calls only
 *    declared tools (only the named one under a named choice, none under "none" or without
 *    tools), each call's arguments valid for its parameters (an independent validator:
 *    tests/unit/schema_validate.h), and answers something when it calls nothing;
 *  - refusals are one line; nothing crashes or leaks.
 *
 * Input: a mode byte (bits: no thinking, a tight budget, parallel_tool_calls false, which choice
 * the walk uses, no walk: the judgment alone, twice as fast), then JSON: a tools array, or
 * {"tools": [...], "tool_choice": ...}, then (after a NUL) the bytes that pick the tokens.
 *
 * Built by `make fuzz` (build-fuzz/fuzz/fuzz_tools); `tests/fuzz/run.sh 60 tools` runs it for a
 * minute from tests/fuzz/corpus/tools (docs/FUZZING.md). */
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/matcher.h"
#include "text/reply_grammar.h"
#include "text/vocab_trie.h"
#include "text/xtml.h"
#include "../unit/json_pointer.h"
#include "../unit/schema_validate.h"

#define WALK_MAX 96

static Tokenizer *tok;
static VocabTrie *trie;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tok = fuzz_load_tokenizer_n(320); /* few merges: masks stay cheap */
    if (!(trie = vocab_trie_new(tok))) abort();
    return 0;
}

/* The grammar for one choice (NULL: refused; msg gets the message); counted in the vocabulary
 * when it will be walked (the judgment does not depend on it). */
static Grammar *compile(const json_t *tools, const json_t *choice, int parallel, int thinking, int walked, char *msg, size_t n) {
    ReplySpec spec = {walked ? trie : NULL, NULL, tools, choice, parallel, thinking};
    Grammar *g = NULL;
    msg[0] = 0;
    if (reply_grammar(&spec, &g)) {
        fuzz_check_message();
        snprintf(msg, n, "%s", df_errmsg());
        df_errclear();
        return NULL;
    }
    FUZZ_ASSERT(g);
    return g;
}

static const json_t *declared(const json_t *tools, const char *name) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) return fn;
    }
    return NULL;
}

/* Walks g with the choices' bytes within a budget, then parses the reply and checks it. */
static void walk(const Grammar *g, const json_t *tools, const json_t *choice, int thinking, int tight, const uint8_t *pick,
                 size_t n_pick) {
    Matcher *m = matcher_new(g, trie);
    FUZZ_ASSERT(m);
    int64_t budget = (int64_t)matcher_min_tokens(m) + (tight ? 0 : 16);
    if (budget > WALK_MAX) {
        matcher_free(m);
        return;
    }
    uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
    int32_t ids[WALK_MAX];
    int n = 0;
    for (int64_t k = 0; k < budget && !matcher_done(m); k++) {
        uint32_t b = n_pick ? pick[k % (int64_t)n_pick] : 0;
        /* the token the input names, when allowed (free text: a cheap check), else one of the mask's */
        int32_t id = (int32_t)((b * 2654435761u) % (uint32_t)trie->n_ids);
        if (!(b & 1) || !matcher_allows(m, id, budget - k)) {
            int allowed = matcher_mask(m, budget - k, bits);
            FUZZ_ASSERT(allowed > 0);
            int want = (int)(b % (uint32_t)allowed);
            id = -1;
            for (int32_t t = 0; t < trie->n_ids && id < 0; t++)
                if (mask_has(bits, t) && want-- == 0) id = t;
        }
        FUZZ_ASSERT(id >= 0 && matcher_accept(m, id) == 0);
        ids[n++] = id;
    }
    FUZZ_ASSERT(matcher_done(m)); /* complete within its budget */
    free(bits);
    matcher_free(m);
    XtmlParser *p = xtml_parser_new(tok, thinking);
    FUZZ_ASSERT(p);
    XtmlDelta d;
    size_t answered = 0;
    for (int i = 0; i < n; i++) {
        FUZZ_ASSERT(xtml_parser_feed(p, ids[i], &d) == 0);
        answered += d.content_len;
    }
    FUZZ_ASSERT(d.done);
    const json_t *calls = xtml_parser_tool_calls(p);
    const char *mode = json_string_value(choice);
    const char *named = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    if (!json_array_size(tools) || (mode && !strcmp(mode, "none"))) FUZZ_ASSERT(json_array_size(calls) == 0);
    if (!json_array_size(calls)) FUZZ_ASSERT(answered > 0);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *decl = declared(tools, name);
        FUZZ_ASSERT(decl && (!named || !strcmp(named, name)));
        json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        const json_t *params = json_object_get(decl, "parameters");
        FUZZ_ASSERT(json_is_object(args) && (!params || sv_check(params, args)));
        json_decref(args);
    }
    xtml_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    json_error_t e;
    json_t *j = json_loadb((const char *)data + 1, size - 1, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &e);
    if (!j) return 0;
    const json_t *tools = json_is_object(j) ? json_object_get(j, "tools") : j;
    const json_t *own = json_is_object(j) ? json_object_get(j, "tool_choice") : NULL;
    int thinking = !(mode & 1), tight = mode & 2, parallel = !(mode & 4);
    json_t *choices[4] = {json_string("auto"), json_string("none"), json_string("required"), json_incref((json_t *)own)};
    char first[320] = "", msg[320];
    int judged = 0;
    for (int c = 0; c < 4; c++) {
        if (c == 3 && !own) continue;
        int walked = !(mode & 0x20) && ((mode >> 3) & 3) == c;
        Grammar *g = compile(tools, choices[c], parallel, thinking, walked, msg, sizeof msg);
        if (!strncmp(msg, "tools", 5)) { /* the tools were judged: alike for every choice */
            if (judged) FUZZ_ASSERT(!strcmp(first, msg));
            else snprintf(first, sizeof first, "%s", msg), judged = 1;
        } else if (!msg[0] && judged && first[0])
            FUZZ_ASSERT(0); /* refused under one choice, accepted under another */
        else if (!msg[0])
            judged = 1; /* accepted: the others must not refuse the tools */
        if (g && walked) {
            size_t at = strnlen((const char *)data + 1, size - 1) + 1; /* the bytes after the JSON pick the tokens */
            walk(g, tools, choices[c], thinking, tight, data + (at < size ? at : 0), at < size ? size - at : size);
        }
        grammar_free(g);
    }
    for (int c = 0; c < 4; c++) json_decref(choices[c]);
    json_decref(j);
    return 0;
}

/* constrain_emit - random constrained outputs for the Node tests, which check them with real
 * peers (ajv for JSON Schema). Reads one JSON request on stdin:
 *   {"schema": S, "strict": bool}                      a bare JSON value valid against S
 *   {"reply": {"response_format": ..., "tools": ..., "tool_choice": ..., "parallel_tool_calls": bool},
 *    "thinking": bool}                                 a whole K3 reply, parsed back by xtml_parse
 * with "walks": N, "budget": B (tokens), "seed": S, and "vocab": the size of the synthetic
 * K3-style vocabulary (plus the fixture's boundary-straddling tokens). Each walk picks, at every
 * step, the best allowed token under fresh random logits (a model with random weights), and prints
 * one JSON line: {"done", "tokens", "text"} for a value; {"done", "tokens", "content",
 * "reasoning", "tool_calls"} for a reply. A request the compiler refuses prints
 * {"error": message} and exits 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain_fixture.h"
#include "text/reply_grammar.h"
#include "text/xtml.h"

static Grammar *grammar_for(const json_t *req, const VocabTrie *trie, int *thinking) {
    Grammar *g = NULL;
    const json_t *reply = json_object_get(req, "reply");
    *thinking = json_is_true(json_object_get(req, "thinking"));
    int rc;
    if (reply) {
        const json_t *par = json_object_get(reply, "parallel_tool_calls");
        ReplySpec spec = {trie, json_object_get(reply, "response_format"), json_object_get(reply, "tools"),
                          json_object_get(reply, "tool_choice"), !json_is_false(par), *thinking};
        rc = reply_grammar(&spec, &g);
        if (!rc && !g) rc = df_fail("nothing to constrain");
    } else
        rc = json_grammar(json_object_get(req, "schema"), json_is_true(json_object_get(req, "strict")), "schema", trie, &g);
    if (rc) {
        json_t *err = json_pack("{s:s}", "error", df_errmsg());
        char *line = json_dumps(err, JSON_COMPACT);
        puts(line);
        free(line), json_decref(err);
        exit(1);
    }
    return g;
}

/* Emits one walk's result as a JSON line. */
static void emit(const Tokenizer *tok, const TokIds *ids, int done, int reply, int thinking) {
    json_t *out = json_pack("{s:b, s:i}", "done", done, "tokens", (int)ids->n);
    if (!reply) {
        StrBuf text = {0};
        sb_add(&text, "", 0);
        for (size_t i = 0; i < ids->n; i++)
            if (!tok_is_special(tok, ids->v[i])) fixture_append_token(tok, ids->v[i], &text);
        json_object_set_new(out, "text", json_stringn(text.p, text.n));
        sb_free(&text);
    } else {
        XtmlParser *p = xtml_parser_new(tok, thinking);
        StrBuf content = {0}, reasoning = {0};
        sb_add(&content, "", 0), sb_add(&reasoning, "", 0);
        for (size_t i = 0; i < ids->n; i++) {
            XtmlDelta d;
            if (xtml_parser_feed(p, ids->v[i], &d)) exit(2);
            sb_add(&content, d.content ? d.content : "", d.content_len);
            sb_add(&reasoning, d.reasoning ? d.reasoning : "", d.reasoning_len);
        }
        json_object_set_new(out, "content", json_stringn(content.p, content.n));
        json_object_set_new(out, "reasoning", json_stringn(reasoning.p, reasoning.n));
        json_object_set(out, "tool_calls", (json_t *)xtml_parser_tool_calls(p));
        sb_free(&content), sb_free(&reasoning);
        xtml_parser_free(p);
    }
    char *line = json_dumps(out, JSON_COMPACT);
    puts(line);
    free(line), json_decref(out);
}

int main(void) {
    json_error_t e;
    json_t *req = json_loadf(stdin, 0, &e);
    if (!req) {
        fprintf(stderr, "constrain_emit: the request is not JSON: %s\n", e.text);
        return 2;
    }
    int thinking, walks = (int)json_integer_value(json_object_get(req, "walks"));
    int64_t budget = json_integer_value(json_object_get(req, "budget"));
    int vocab = (int)json_integer_value(json_object_get(req, "vocab"));
    uint64_t seed = (uint64_t)json_integer_value(json_object_get(req, "seed"));
    Tokenizer *tok = fixture_tricky(vocab >= 256 ? vocab : 2000);
    VocabTrie *trie = fixture_trie(tok);
    Grammar *g = grammar_for(req, trie, &thinking);
    for (int w = 0; w < walks; w++) {
        Rng rng;
        rng_seed(&rng, seed + (uint64_t)w);
        Matcher *m = matcher_new(g, trie);
        uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
        TokIds ids = {0};
        for (int64_t k = 0; k < budget && !matcher_done(m); k++) {
            int n = matcher_mask(m, budget - k, bits);
            int32_t id = fixture_pick(bits, tok_vocab_size(tok), n, &rng, PICK_RANDOM_LOGITS);
            if (id < 0 || matcher_accept(m, id)) break;
            tokids_push(&ids, id);
        }
        emit(tok, &ids, matcher_done(m), json_object_get(req, "reply") != NULL, thinking);
        tokids_free(&ids);
        free(bits);
        matcher_free(m);
    }
    vocab_trie_free(trie);
    tok_free(tok);
    grammar_free(g);
    json_decref(req);
    fixture_cleanup();
    return 0;
}

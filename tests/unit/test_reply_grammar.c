/* Constrained K3 replies: thinking, the response, and tool calls in K3's chat format. Masks are
 * checked token by token against an independent reading of the format (docs/MODEL.md 6.3 and
 * jsonschema.h's argument rules); walks of random-weight-like picks end within budget in a
 * reply that src/text/xtml_parse.c turns into OpenAI tool calls whose arguments validate
 * against the function's parameters, as tool_choice and parallel_tool_calls ask. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "constrain_fixture.h"
#include "schema_oracle.h"
#include "schema_validate.h"
#include "text/reply_grammar.h"
#include "text/xtml.h"

static Tokenizer *tok;
static VocabTrie *trie;
static int32_t marker_id[GM_N];

static const char *const tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},\"unit\":{\"enum\":[\"c\",\"f\"]},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"strict\":true,\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"zone\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"zone\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"store\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"q\\\"&x\":{},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},"
    "\"opts\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}}}},\"required\":[\"q\\\"&x\"]}}}]";

typedef struct {
    const char *name;
    const char *tool_choice;     /* JSON, or NULL */
    const char *response_format; /* JSON, or NULL */
    int parallel, thinking;
    int no_tools;                /* the request declares no tools */
} Case;

static const Case cases[] = {
    {"required", "\"required\"", NULL, 1, 1, 0},
    {"named store, one call, no thinking", "{\"type\":\"function\",\"function\":{\"name\":\"store\"}}", NULL, 0, 0, 0},
    {"none with a json_schema answer", "\"none\"",
     "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":true,\"schema\":{\"type\":\"object\","
     "\"properties\":{\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":[\"integer\",\"null\"]}},\"required\":[\"ok\",\"n\"],"
     "\"additionalProperties\":false}}}",
     1, 1, 0},
    {"auto with a json_object answer", "\"auto\"", "{\"type\":\"json_object\"}", 1, 0, 0},
    {"required, one call", "\"required\"", NULL, 0, 1, 0},
    {"auto with a text answer", "\"auto\"", NULL, 1, 1, 0},
    {"auto without tools", "\"auto\"", NULL, 1, 1, 1},
    {"none with a text answer", "\"none\"", NULL, 1, 0, 0},
};
#define N_CASES (sizeof cases / sizeof *cases)

static json_t *load(const char *text) {
    json_error_t e;
    json_t *j = text ? json_loads(text, JSON_DECODE_ANY, &e) : NULL;
    if (text && !j) {
        fprintf(stderr, "test JSON does not parse: %s\n", e.text);
        exit(2);
    }
    return j;
}

typedef struct {
    json_t *tools, *tool_choice, *response_format;
    ReplySpec spec;
    Grammar *g;
} Built;

static Built build(const Case *c) {
    Built b = {c->no_tools ? NULL : load(tools_json), load(c->tool_choice), load(c->response_format), {0}, NULL};
    b.spec = (ReplySpec){trie, b.response_format, b.tools, b.tool_choice, c->parallel, c->thinking};
    if (reply_grammar(&b.spec, &b.g) || !b.g) {
        fprintf(stderr, "reply_grammar(%s): %s\n", c->name, df_errmsg());
        exit(2);
    }
    return b;
}

static void built_free(Built *b) {
    grammar_free(b->g);
    json_decref(b->tools), json_decref(b->tool_choice), json_decref(b->response_format);
}

/* ------------------------------------------------------------------ an independent reading */

enum { U_OPEN = 256, U_CLOSE, U_SEP, U_EOM };

typedef struct {
    const int *u;
    int n, p;
    int eof; /* the input ended while everything so far was valid */
} Xo;

typedef struct {
    int u[4096];
    int n;
} Lit;

static void lit_text(Lit *l, const char *s) {
    while (*s) l->u[l->n++] = (unsigned char)*s++;
}

static void lit_unit(Lit *l, int u) { l->u[l->n++] = u; }

/* Which candidate the input continues with: its index (input moved past it), -1 for none, -2
 * when the input ended while one still matched. */
static int xo_one_of(Xo *x, const Lit *c, int nc) {
    int cut = 0;
    for (int i = 0; i < nc; i++) {
        int k = 0;
        while (k < c[i].n && x->p + k < x->n && x->u[x->p + k] == c[i].u[k]) k++;
        if (k == c[i].n) {
            x->p += k;
            return i;
        }
        if (x->p + k == x->n) cut = 1;
    }
    if (cut) x->eof = 1;
    return cut ? -2 : -1;
}

static int xo_lit(Xo *x, const char *text_with_markers) {
    Lit l = {.n = 0};
    for (const char *s = text_with_markers; *s; s++) {
        if (*s >= 1 && *s <= 4) lit_unit(&l, U_OPEN + *s - 1);
        else lit_unit(&l, (unsigned char)*s);
    }
    return xo_one_of(x, &l, 1);
}
#define XO "\x01"
#define XC "\x02"
#define XS "\x03"
#define XE "\x04"

/* The bytes up to the next marker: [start, *end); 1 when the input ended first. */
static int xo_text(Xo *x, uint8_t *buf, int *len) {
    *len = 0;
    while (x->p < x->n && x->u[x->p] < 256) buf[(*len)++] = (uint8_t)x->u[x->p++];
    return x->p == x->n;
}

/* The JSON types a schema admits (bits OT_*). */
static int xo_types(const json_t *root, const json_t *s, int depth) {
    if (depth > 32 || json_is_false(s)) return 0;
    if (json_is_true(s) || !json_object_size(s)) return OT_ALL;
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) return xo_types(root, json_pointer(root, json_string_value(v)), depth + 1);
    if ((v = json_object_get(s, "anyOf"))) {
        int t = 0;
        for (size_t i = 0; i < json_array_size(v); i++) t |= xo_types(root, json_array_get(v, i), depth + 1);
        return t;
    }
    int integer = 0, listed = json_object_get(s, "type") ? orc_type_bits(json_object_get(s, "type"), &integer) : OT_ALL;
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (!en && !cn) return listed;
    int t = 0;
    for (size_t i = 0; i < (en ? json_array_size(en) : 1); i++) {
        int integral, vt = orc_type_of(en ? json_array_get(en, i) : cn, &integral);
        if ((vt & listed) && !(vt == OT_NUMBER && integer && !integral)) t |= vt;
    }
    return t;
}

/* A raw string argument: valid (or, cut, a valid prefix) for the string branches of s. */
static int xo_raw(const json_t *root, const json_t *s, const uint8_t *b, int n, int cut, int depth) {
    if (depth > 32 || json_is_false(s)) return 0;
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) return xo_raw(root, json_pointer(root, json_string_value(v)), b, n, cut, depth + 1);
    if ((v = json_object_get(s, "anyOf"))) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (xo_raw(root, json_array_get(v, i), b, n, cut, depth + 1)) return 1;
        return 0;
    }
    if (!(xo_types(root, s, 0) & OT_STRING)) return 0;
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        for (size_t i = 0; i < (en ? json_array_size(en) : 1); i++) {
            const json_t *e = en ? json_array_get(en, i) : cn;
            if (!json_is_string(e)) continue;
            size_t len = json_string_length(e);
            if (cut ? (size_t)n <= len && !memcmp(b, json_string_value(e), (size_t)n)
                    : (size_t)n == len && !memcmp(b, json_string_value(e), len))
                return 1;
        }
        return 0;
    }
    long count = 0, min = json_is_object(s) ? (long)json_integer_value(json_object_get(s, "minLength")) : 0;
    long max = json_object_get(s, "maxLength") ? (long)json_integer_value(json_object_get(s, "maxLength")) : LONG_MAX;
    for (int p = 0; p < n;) {
        if (b[p] == 0 || count >= max) return 0;
        int len = orc_utf8(b + p, n - p);
        if (len == 0) return 0;
        if (len < 0) return cut;
        p += len, count++;
    }
    return cut || count >= min;
}

static const json_t *tool_params(const json_t *tools, int i) {
    return json_object_get(json_object_get(json_array_get(tools, (size_t)i), "function"), "parameters");
}

static const char *tool_name(const json_t *tools, int i) {
    return json_string_value(json_object_get(json_object_get(json_array_get(tools, (size_t)i), "function"), "name"));
}

static void xml_attr(Lit *l, const char *s) {
    for (; *s; s++) {
        if (*s == '&') lit_text(l, "&amp;");
        else if (*s == '"') lit_text(l, "&quot;");
        else lit_unit(l, (unsigned char)*s);
    }
}

static const char *const type_word[] = {"null", "boolean", "object", "array", "number", "string"};

/* The arguments of one call of function f; 1 while valid. */
static int xo_arguments(Xo *x, const json_t *params) {
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    const char *keys[64];
    const json_t *schemas[64];
    int nk = 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) keys[nk] = key, schemas[nk++] = v;
    static uint8_t buf[1 << 16];
    for (int i = 0;;) {
        static Lit cand[64 * 6 + 1];
        int who[64 * 6 + 1], type[64 * 6 + 1], nc = 0, req_left = 0;
        for (int k = i; k < nk; k++) {
            for (int t = 0; t < 6; t++) {
                if (!(xo_types(params, schemas[k], 0) >> t & 1)) continue;
                Lit *l = &cand[nc];
                l->n = 0;
                lit_unit(l, U_OPEN), lit_text(l, "argument key=\""), xml_attr(l, keys[k]), lit_text(l, "\" type=\"");
                lit_text(l, type_word[t]), lit_text(l, "\""), lit_unit(l, U_SEP);
                who[nc] = k, type[nc++] = t;
            }
            if (orc_required(req, keys[k])) {
                req_left = 1;
                break;
            }
        }
        if (!req_left) {
            cand[nc].n = 0;
            lit_unit(&cand[nc], U_CLOSE), lit_text(&cand[nc], "call"), lit_unit(&cand[nc], U_SEP);
            who[nc++] = -1;
        }
        int r = xo_one_of(x, cand, nc);
        if (r < 0) return r == -2;
        if (who[r] < 0) return 1;
        int len, cut = xo_text(x, buf, &len), complete;
        const json_t *s = schemas[who[r]];
        if (type[r] == 5) {
            if (!xo_raw(params, s, buf, len, cut, 0)) return 0;
        } else if (!orc_check_in(params, s, 1 << type[r], buf, len, &complete) || (!cut && !complete))
            return 0;
        if (cut) return 1;
        if (xo_lit(x, XC "argument" XS) < 0) return x->eof;
        i = who[r] + 1;
    }
}

/* 1 when u[0..n) is a valid prefix of a constrained reply for case c. */
static int xo_check(const Case *c, const Built *b, const int *u, int n, int *complete) {
    Xo x = {u, n, 0, 0};
    static uint8_t buf[1 << 16];
    int len;
    *complete = 0;
    if (c->thinking) {
        if (xo_text(&x, buf, &len)) return 1;
        if (xo_lit(&x, XC "think" XS XO "response" XS) < 0) return x.eof;
    }
    const char *tc = json_string_value(b->tool_choice);
    int named = -1, n_tools = (int)json_array_size(b->tools);
    for (int i = 0; i < n_tools && !tc; i++)
        if (!strcmp(tool_name(b->tools, i), json_string_value(json_object_get(json_object_get(b->tool_choice, "function"), "name"))))
            named = i;
    int tools_allowed = n_tools && (!tc || strcmp(tc, "none")), tools_needed = tools_allowed && (!tc || !strcmp(tc, "required"));
    /* a text answer that no call must follow is at least one character of well-formed UTF-8 */
    int said = !b->response_format && !tools_needed;
    int cut = xo_text(&x, buf, &len);
    if (b->response_format) {
        const json_t *schema = json_object_get(json_object_get(b->response_format, "json_schema"), "schema");
        json_t *any_object = json_pack("{s:s}", "type", "object");
        int ok = orc_check(schema ? schema : any_object, OT_ALL, buf, len, complete);
        json_decref(any_object);
        if (!ok || (!cut && !*complete)) return 0;
        *complete = 0;
    } else if (said && len) {
        json_t *text = json_pack("{s:s, s:i}", "type", "string", "minLength", 1);
        int ok = xo_raw(text, text, buf, len, cut, 0);
        json_decref(text);
        if (!ok) return 0;
    }
    if (cut) return 1;
    if (said && !len) { /* empty: only when calls follow */
        if (!tools_allowed) return 0;
        tools_needed = 1;
    }
    if (xo_lit(&x, XC "response" XS) < 0) return x.eof;
    static Lit cand[64];
    int nc = 0;
    if (tools_allowed) {
        cand[nc].n = 0, lit_unit(&cand[nc], U_OPEN), lit_text(&cand[nc], "tools"), lit_unit(&cand[nc++], U_SEP);
    }
    if (!tools_needed) {
        cand[nc].n = 0, lit_unit(&cand[nc], U_CLOSE), lit_text(&cand[nc], "message"), lit_unit(&cand[nc], U_SEP);
        lit_unit(&cand[nc++], U_EOM);
    }
    int r = xo_one_of(&x, cand, nc);
    if (r < 0) return r == -2;
    if (!tools_allowed || r == 1) return *complete = x.p == n, x.p == n;
    for (int call = 1;; call++) {
        int fn[64];
        nc = 0;
        for (int i = 0; i < n_tools; i++) {
            if (named >= 0 && i != named) continue;
            char idx[32];
            snprintf(idx, sizeof idx, "\" index=\"%d\"", call);
            cand[nc].n = 0, lit_unit(&cand[nc], U_OPEN), lit_text(&cand[nc], "call tool=\""), lit_text(&cand[nc], tool_name(b->tools, i));
            lit_text(&cand[nc], idx), lit_unit(&cand[nc], U_SEP);
            fn[nc++] = i;
        }
        if (call > 1 && (!c->parallel || nc == 0)) nc = 0;
        if (call > 1) {
            cand[nc].n = 0, lit_unit(&cand[nc], U_CLOSE), lit_text(&cand[nc], "tools"), lit_unit(&cand[nc], U_SEP);
            fn[nc++] = -1;
        }
        r = xo_one_of(&x, cand, nc);
        if (r < 0) return r == -2;
        if (fn[r] < 0) break;
        if (!xo_arguments(&x, tool_params(b->tools, fn[r]))) return 0;
        if (x.p == n || x.eof) return 1;
    }
    if (xo_lit(&x, XC "message" XS XE) < 0) return x.eof;
    *complete = x.p == n;
    return x.p == n;
}

/* ------------------------------------------------------------------ tests */

static int marker_of(int32_t id) {
    for (int m = 0; m < GM_N; m++)
        if (marker_id[m] == id) return m;
    return -1;
}

/* Appends a token's units; 0 for a special token that is not a marker. */
static int token_units(int32_t id, int *u, int *n) {
    if (tok_is_special(tok, id)) {
        int m = marker_of(id);
        if (m < 0) return 0;
        u[(*n)++] = U_OPEN + m;
        return 1;
    }
    size_t len;
    const uint8_t *b = tok_token_bytes(tok, id, &len);
    for (size_t i = 0; i < len; i++) u[(*n)++] = b[i];
    return 1;
}

static void masks_match_the_format_token_by_token(void) {
    static int units[1 << 15];
    for (size_t c = 0; c < N_CASES; c++) {
        Built b = build(&cases[c]);
        for (int w = 0; w < 2; w++) {
            Rng rng;
            rng_seed(&rng, 50 * c + w);
            Matcher *m = matcher_new(b.g, trie);
            uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
            int n = 0, bad = 0;
            for (int step = 0; step < 40 && !matcher_done(m) && !bad; step++) {
                int allowed = matcher_mask(m, -1, bits);
                for (int32_t id = 0; id < tok_vocab_size(tok) && !bad; id++) {
                    int k = n, complete, want = token_units(id, units, &k) && xo_check(&cases[c], &b, units, k, &complete);
                    if (mask_has(bits, id) != want) {
                        size_t len;
                        const uint8_t *tb = tok_token_bytes(tok, id, &len);
                        CHECK_MSG(0, "%s, step %d: token %d '%.*s': mask %d, format %d", cases[c].name, step, id, (int)len,
                                  (const char *)tb, mask_has(bits, id), want);
                        bad = 1;
                    }
                }
                int32_t id = fixture_pick(bits, tok_vocab_size(tok), allowed, &rng, w ? PICK_RANDOM_LOGITS : PICK_UNIFORM);
                CHECK(id >= 0 && matcher_accept(m, id) == 0);
                token_units(id, units, &n);
            }
            free(bits);
            matcher_free(m);
        }
        built_free(&b);
    }
}

typedef struct {
    TokIds ids;
    int done;
} Reply;

static Reply walk(const Grammar *g, int64_t budget, uint64_t seed, PickMode mode) {
    Rng rng;
    rng_seed(&rng, seed);
    Matcher *m = matcher_new(g, trie);
    uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
    Reply r = {{0}, 0};
    for (int64_t k = 0; k < budget && !matcher_done(m); k++) {
        int n = matcher_mask(m, budget - k, bits);
        int32_t id = fixture_pick(bits, tok_vocab_size(tok), n, &rng, mode);
        if (id < 0 || matcher_accept(m, id)) break;
        tokids_push(&r.ids, id);
    }
    r.done = matcher_done(m);
    free(bits);
    matcher_free(m);
    return r;
}

/* The call indexes written in the reply's headers, in order: must be 1, 2, ... */
static int indexes_count_up(const Reply *r) {
    char *text = tok_decode(tok, r->ids.v, r->ids.n, NULL);
    int want = 1, ok = 1;
    for (const char *p = strstr(text, "<|open|>call tool=\""); p; p = strstr(p + 1, "<|open|>call tool=\"")) {
        const char *idx = strstr(p, "\" index=\"");
        ok &= idx && atoi(idx + 9) == want++;
    }
    free(text);
    return ok;
}

static void check_parsed(const Case *c, const Built *b, const Reply *r, const char *what) {
    XtmlParser *p = xtml_parser_new(tok, c->thinking);
    StrBuf content = {0};
    sb_add(&content, "", 0);
    int done = 0;
    for (size_t i = 0; i < r->ids.n; i++) {
        XtmlDelta d;
        CHECK(xtml_parser_feed(p, r->ids.v[i], &d) == 0);
        if (d.content_len) sb_add(&content, d.content, d.content_len);
        done |= d.done;
    }
    CHECK_MSG(done, "%s: the parser saw no end", what);
    const json_t *calls = xtml_parser_tool_calls(p);
    size_t n = json_array_size(calls);
    const char *tc = json_string_value(b->tool_choice);
    if (tc && !strcmp(tc, "none")) CHECK_MSG(n == 0, "%s: %zu calls with tool_choice none", what, n);
    if (!tc || !strcmp(tc, "required")) CHECK_MSG(n >= 1, "%s: no call", what);
    if (!c->parallel) CHECK_MSG(n <= 1, "%s: %zu calls without parallel calls", what, n);
    CHECK_MSG(indexes_count_up(r), "%s: call indexes are not 1, 2, ...", what);
    for (size_t i = 0; i < n; i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        int which = -1;
        for (size_t t = 0; t < json_array_size(b->tools); t++)
            if (!strcmp(name, tool_name(b->tools, (int)t))) which = (int)t;
        CHECK_MSG(which >= 0, "%s: call of undeclared '%s'", what, name);
        if (!tc && which >= 0) CHECK(!strcmp(name, "store"));
        json_error_t e;
        json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, &e);
        const json_t *params = which >= 0 ? tool_params(b->tools, which) : NULL;
        json_t *no_params = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 0);
        CHECK_MSG(args && json_is_object(args), "%s: arguments do not parse: %s", what, e.text);
        CHECK_MSG(args && sv_check(params ? params : no_params, args), "%s: arguments of %s do not validate: %s", what, name,
                  json_string_value(json_object_get(fn, "arguments")));
        json_decref(args), json_decref(no_params);
    }
    if (b->response_format) {
        const json_t *schema = json_object_get(json_object_get(b->response_format, "json_schema"), "schema");
        json_error_t e;
        json_t *v = json_loads(content.p, 0, &e);
        CHECK_MSG(v && json_is_object(v), "%s: the answer '%s' is not a JSON object", what, content.p);
        if (v && schema) CHECK_MSG(sv_check(schema, v), "%s: the answer '%s' does not validate", what, content.p);
        json_decref(v);
    }
    sb_free(&content);
    xtml_parser_free(p);
}

static void replies_parse_into_valid_tool_calls(void) {
    for (size_t c = 0; c < N_CASES; c++) {
        Built b = build(&cases[c]);
        Matcher *m0 = matcher_new(b.g, trie);
        int64_t least = matcher_min_tokens(m0);
        matcher_free(m0);
        int64_t budgets[] = {least, least + 5, least + 80, least + 400};
        for (size_t k = 0; k < sizeof budgets / sizeof *budgets; k++)
            for (int seed = 0; seed < 3; seed++) {
                Reply r = walk(b.g, budgets[k], 1000 * c + 10 * k + seed, seed ? PICK_RANDOM_LOGITS : PICK_UNIFORM);
                char what[128];
                snprintf(what, sizeof what, "%s, budget %lld, seed %d", cases[c].name, (long long)budgets[k], seed);
                CHECK_MSG(r.done && (int64_t)r.ids.n <= budgets[k], "%s: %s after %zu tokens", what,
                          r.done ? "over budget" : "not finished", r.ids.n);
                if (r.done) check_parsed(&cases[c], &b, &r, what);
                tokids_free(&r.ids);
            }
        built_free(&b);
    }
}

/* Every chat gets a grammar, even a text answer under auto (it may call declared tools only);
 * refusals name the field, and a tool's schema is refused alike under every tool_choice. */
static void requests_map_to_grammars_or_refusals(void) {
    json_t *tools = load(tools_json), *auto_choice = load("\"auto\""), *text_rf = load("{\"type\":\"text\"}");
    ReplySpec spec = {trie, text_rf, tools, auto_choice, 1, 1};
    Grammar *g = NULL;
    CHECK(reply_grammar(&spec, &g) == 0 && g != NULL);
    grammar_free(g);
    spec.tools = NULL;
    g = NULL;
    CHECK(reply_grammar(&spec, &g) == 0 && g != NULL);
    grammar_free(g);
    const char *choices[] = {"\"auto\"", "\"none\"", "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"a\"}}", NULL};
    json_t *odd = load("[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"x\":{\"not\":{\"type\":\"string\"}}}}}}]");
    json_t *not_object = load("[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":\"x\"}}]");
    for (int i = 0; i < 5; i++) {
        json_t *tc = load(choices[i]);
        ReplySpec s = {trie, NULL, odd, tc, 1, 1};
        g = NULL;
        CHECK_MSG(reply_grammar(&s, &g) == -1 && !g && strstr(df_errmsg(), "tools[0].function.parameters.properties.x: 'not'"),
                  "choice %s: '%s'", choices[i] ? choices[i] : "absent", df_errmsg());
        s.tools = not_object;
        CHECK_MSG(reply_grammar(&s, &g) == -1 && !g && !strncmp(df_errmsg(), "tools[0].function.parameters", 28),
                  "choice %s: '%s'", choices[i] ? choices[i] : "absent", df_errmsg());
        json_decref(tc);
    }
    json_decref(odd), json_decref(not_object);
    static const struct {
        const char *rf, *tools, *tc, *msg;
    } bad[] = {
        {"{\"type\":\"xml\"}", NULL, NULL, "response_format.type: 'xml' is not one of"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}", NULL, NULL, "response_format.json_schema.name:"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"array\"}}}", NULL,
         NULL, "response_format.json_schema.schema: strict mode needs the root"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"format\":\"uri\"}}}",
         NULL, NULL, "response_format.json_schema.schema: 'format' \"uri\" cannot be enforced"},
        {NULL, "[{\"type\":\"retrieval\"}]", "\"required\"", "tools[0].type: only \"function\""},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "\"required\"", "tools[0].function.name:"},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]",
         "\"required\"", "tools[1].function.name: 'a' is declared twice"},
        {NULL, NULL, "\"required\"", "tool_choice: 'required' needs 'tools'"},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]", "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}",
         "tool_choice.function.name: 'b' is not among"},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
               "\"additionalProperties\":{\"type\":\"string\"}}}}]",
         "\"required\"", "tools[0].function.parameters: arguments with any names"},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true,\"parameters\":{\"type\":\"object\","
               "\"properties\":{\"x\":{\"type\":\"string\"}}}}}]",
         "\"required\"", "tools[0].function.parameters: strict mode needs \"additionalProperties\": false"},
        {NULL, "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\",\"properties\":{"
               "\"x\":{\"type\":\"number\",\"multipleOf\":0.5}}}}}]",
         "\"required\"", "tools[0].function.parameters.properties.x: 'multipleOf' 0.5 cannot be enforced"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *rf = load(bad[i].rf), *t = load(bad[i].tools), *tc = load(bad[i].tc);
        ReplySpec s = {trie, rf, t, tc, 1, 1};
        g = NULL;
        int rc = reply_grammar(&s, &g);
        CHECK_MSG(rc == -1 && !g && !strncmp(df_errmsg(), bad[i].msg, strlen(bad[i].msg)), "case %zu: rc %d, '%s'", i, rc,
                  df_errmsg());
        json_decref(rf), json_decref(t), json_decref(tc);
    }
    json_decref(tools), json_decref(auto_choice), json_decref(text_rf);
}

int main(void) {
    tok = fixture_tricky(700);
    trie = fixture_trie(tok);
    static const char *const spell[GM_N] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (int m = 0; m < GM_N; m++) marker_id[m] = tok_special_id(tok, spell[m]);
    RUN(masks_match_the_format_token_by_token);
    RUN(replies_parse_into_valid_tool_calls);
    RUN(requests_map_to_grammars_or_refusals);
    vocab_trie_free(trie);
    tok_free(tok);
    fixture_cleanup();
    return check_summary();
}

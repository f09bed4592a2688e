/* reply_grammar.c - checking a chat request's structured-output fields and building the
 * grammar of K3's reply from them (see reply_grammar.h). */
#include "text/reply_grammar.h"

#include <stdio.h>
#include <string.h>

#include "text/jsonschema.h"
#include "text/strbuf.h"
#include "util/err.h"

#define NAME_MAX_LEN 64

typedef enum { RF_TEXT, RF_OBJECT, RF_SCHEMA } RfMode;
typedef enum { TC_NONE, TC_AUTO, TC_REQUIRED, TC_NAMED } ToolMode;

/* OpenAI's rule for function and schema names: ^[a-zA-Z0-9_-]{1,64}$. */
static int valid_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n >= 1 && n <= NAME_MAX_LEN && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static int optional_bool(const json_t *o, const char *key, int dflt, const char *where, int *out) {
    const json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_boolean(v)) return df_fail("%s.%s: must be a boolean", where, key);
    *out = json_is_true(v);
    return 0;
}

static int check_response_format(const json_t *rf, RfMode *mode, const json_t **schema, int *strict) {
    *mode = RF_TEXT, *schema = NULL, *strict = 0;
    if (!rf) return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type) return df_fail("response_format: must be an object with a 'type'");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        *mode = RF_OBJECT;
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return df_fail("response_format.type: '%.40s' is not one of text, json_object, json_schema", type);
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return df_fail("response_format.json_schema: must be an object");
    if (!valid_name(json_string_value(json_object_get(js, "name"))))
        return df_fail("response_format.json_schema.name: must be 1 to 64 letters, digits, '_' or '-'");
    if (optional_bool(js, "strict", 0, "response_format.json_schema", strict)) return -1;
    *schema = json_object_get(js, "schema");
    if (!*schema) return df_fail("response_format.json_schema.schema: missing");
    const json_t *root_type = json_object_get(*schema, "type");
    if (*strict && !(json_is_string(root_type) && !strcmp(json_string_value(root_type), "object")))
        return df_fail("response_format.json_schema.schema: strict mode needs the root to be \"type\": \"object\"");
    *mode = RF_SCHEMA;
    return 0;
}

static int check_tools(const json_t *tools) {
    if (!tools) return 0;
    if (!json_is_array(tools)) return df_fail("tools: must be an array");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type || strcmp(type, "function"))
            return df_fail("tools[%zu].type: only \"function\" tools are supported", i);
        if (!json_is_object(fn)) return df_fail("tools[%zu].function: must be an object", i);
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!valid_name(name)) return df_fail("tools[%zu].function.name: must be 1 to 64 letters, digits, '_' or '-'", i);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(name, json_string_value(json_object_get(json_object_get(json_array_get(tools, k), "function"), "name"))))
                return df_fail("tools[%zu].function.name: '%s' is declared twice", i, name);
        char where[64];
        int strict;
        snprintf(where, sizeof where, "tools[%zu].function", i);
        if (optional_bool(fn, "strict", 0, where, &strict)) return -1;
    }
    return 0;
}

/* tool_choice; *named is the index of the function named, or -1. */
static int check_tool_choice(const json_t *tc, const json_t *tools, ToolMode *mode, int *named) {
    size_t n_tools = json_array_size(tools);
    *mode = TC_AUTO, *named = -1;
    if (!tc) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) *mode = TC_AUTO;
        else if (!strcmp(s, "none")) *mode = TC_NONE;
        else if (!strcmp(s, "required")) *mode = TC_REQUIRED;
        else return df_fail("tool_choice: '%.40s' is not one of none, auto, required", s);
        if (*mode == TC_REQUIRED && !n_tools) return df_fail("tool_choice: 'required' needs 'tools'");
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    if (!json_is_object(tc) || !type || strcmp(type, "function") || !name)
        return df_fail("tool_choice: must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (size_t i = 0; i < n_tools; i++)
        if (!strcmp(name, json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name")))) {
            *mode = TC_NAMED, *named = (int)i;
            return 0;
        }
    return df_fail("tool_choice.function.name: '%.64s' is not among the declared tools", name);
}

/* ------------------------------------------------------------------ nodes */

typedef struct {
    GUnit u[64];
    size_t n;
} Units;

/* Text with chat markers: "\x01" .. "\x04" stand for <|open|> <|close|> <|sep|> <|end_of_msg|>. */
static GSpan chat(Grammar *g, const char *s) {
    Units b = {.n = 0};
    for (; *s && b.n < sizeof b.u / sizeof *b.u; s++) b.u[b.n++] = *s >= 1 && *s <= 4 ? GU_MARKER(*s - 1) : (GUnit)(unsigned char)*s;
    return gb_units(g, b.u, b.n);
}
#define OPEN "\x01"
#define CLOSE "\x02"
#define SEP "\x03"
#define EOM "\x04"

static uint32_t chat_lit(Grammar *g, const char *s) { return gb_lit1(g, chat(g, s)); }

/* One call of function fn: the header literal goes in *lit, the rest is the continuation. */
static int call_case(Grammar *g, const json_t *fn, size_t i, GSpan *lit, uint32_t *cont) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    GSpan head[3] = {chat(g, OPEN "call tool=\""), gb_text(g, name, strlen(name)), chat(g, "\" index=\"")};
    *lit = gb_join(g, head, 3);
    char where[64];
    int strict;
    uint32_t args;
    snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
    if (optional_bool(fn, "strict", 0, where, &strict) ||
        jsonschema_arguments(g, json_object_get(fn, "parameters"), strict, where, &args))
        return -1;
    uint32_t kids[4] = {gb_leaf(g, GK_COUNTER, 0, 0, 0), chat_lit(g, "\"" SEP), args, chat_lit(g, CLOSE "call" SEP)};
    *cont = gb_seq(g, kids, 4);
    return 0;
}

/* The tools element: one or more calls of the functions allowed (all, or only `named`). */
static int tools_element(Grammar *g, const json_t *tools, int named, int parallel, uint32_t *node) {
    size_t n = json_array_size(tools), k = 0;
    GSpan *lits = df_malloc(n * sizeof *lits);
    uint32_t *conts = df_malloc(n * sizeof *conts);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (named < 0 || (size_t)named == i) {
            rc = call_case(g, json_object_get(json_array_get(tools, i), "function"), i, &lits[k], &conts[k]);
            k++;
        }
    if (!rc) {
        uint32_t calls = gb_repeat(g, gb_switch(g, lits, conts, k), 1, parallel ? UINT32_MAX : 1, (GSpan){0, 0},
                                   (GSpan){0, 0}, (GSpan){0, 0}, 1);
        uint32_t kids[3] = {chat_lit(g, OPEN "tools" SEP), calls, chat_lit(g, CLOSE "tools" SEP)};
        *node = gb_seq(g, kids, 3);
    }
    free(lits), free(conts);
    return rc;
}

static int response_node(Grammar *g, RfMode mode, const json_t *schema, int strict, uint32_t *node) {
    if (mode == RF_TEXT) *node = gb_leaf(g, GK_FREE, 0, 0, 0);
    else if (mode == RF_OBJECT) *node = jsonschema_any_object(g);
    else return jsonschema_value(g, schema, strict, "response_format.json_schema.schema", node);
    return 0;
}

/* Every declared tool judged alone, as when only it may be called (its arguments compiled and
 * analysed), and all of them together for size, whatever tool_choice says: a definition refused
 * under one choice is refused under every choice, with the same message. */
static int check_tool_schemas(const json_t *tools) {
    int rc = 0;
    for (size_t i = 0; i < json_array_size(tools) && !rc; i++) {
        Grammar *one = grammar_new();
        uint32_t node;
        char where[64];
        snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
        rc = tools_element(one, tools, (int)i, 1, &node) || grammar_finish(one, gb_seq(one, &node, 1), where, NULL);
        grammar_free(one);
    }
    if (rc || !json_array_size(tools)) return rc;
    Grammar *all = grammar_new();
    uint32_t node;
    rc = tools_element(all, tools, -1, 1, &node);
    if (!rc && all->too_big)
        rc = df_fail("tools: too large to enforce (at most %d nodes, %d literals, %u characters of literal text)", GRAMMAR_MAX_NODES,
                     GRAMMAR_MAX_LITS, GRAMMAR_MAX_UNITS);
    grammar_free(all);
    return rc;
}

/* The response element and what may follow it, down to the tools element. A free-text answer
 * may be empty only when calls follow it; tools is the tools element, or GRAMMAR_NONE when no
 * call may be made. */
static uint32_t answer_and_calls(Grammar *g, RfMode rf, uint32_t response, uint32_t tools, ToolMode tc) {
    uint32_t close = chat_lit(g, CLOSE "response" SEP);
    if (tools == GRAMMAR_NONE) {
        uint32_t text = rf == RF_TEXT ? gb_leaf(g, GK_RAWSTR, 1, UINT32_MAX, 0) : response;
        uint32_t kids[2] = {text, close};
        return gb_seq(g, kids, 2);
    }
    if (tc != TC_AUTO) {
        uint32_t kids[3] = {response, close, tools};
        return gb_seq(g, kids, 3);
    }
    uint32_t optional = gb_repeat(g, tools, 0, 1, (GSpan){0, 0}, (GSpan){0, 0}, (GSpan){0, 0}, 0);
    if (rf != RF_TEXT) {
        uint32_t kids[3] = {response, close, optional};
        return gb_seq(g, kids, 3);
    }
    uint32_t said[3] = {gb_leaf(g, GK_RAWSTR, 1, UINT32_MAX, 0), close, optional}, calls_only[2] = {close, tools};
    uint32_t alts[2] = {gb_seq(g, said, 3), gb_seq(g, calls_only, 2)};
    return gb_choice(g, alts, 2);
}

int reply_grammar(const ReplySpec *spec, Grammar **out) {
    RfMode rf;
    ToolMode tc;
    const json_t *schema;
    int strict, named;
    *out = NULL;
    if (check_response_format(spec->response_format, &rf, &schema, &strict) || check_tools(spec->tools) ||
        check_tool_choice(spec->tool_choice, spec->tools, &tc, &named) || check_tool_schemas(spec->tools))
        return -1;
    int calls = tc != TC_NONE && json_array_size(spec->tools);
    Grammar *g = grammar_new();
    uint32_t kids[4], n = 0, response, tools = GRAMMAR_NONE;
    if (spec->thinking) {
        kids[n++] = gb_leaf(g, GK_FREE, 0, 0, 0);
        kids[n++] = chat_lit(g, CLOSE "think" SEP OPEN "response" SEP);
    }
    int rc = response_node(g, rf, schema, strict, &response);
    if (!rc && calls) rc = tools_element(g, spec->tools, named, spec->parallel_tool_calls, &tools);
    kids[n++] = answer_and_calls(g, rf, response, tools, tc);
    kids[n++] = chat_lit(g, CLOSE "message" SEP EOM);
    if (!rc) rc = grammar_finish(g, gb_seq(g, kids, n), rf == RF_TEXT ? "tools" : "response_format", spec->vocab);
    if (rc) {
        grammar_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int json_grammar(const json_t *schema, int strict, const char *where, const struct VocabTrie *vocab, Grammar **out) {
    Grammar *g = grammar_new();
    uint32_t kids[2];
    int rc = 0;
    if (schema) rc = jsonschema_value(g, schema, strict, where, &kids[0]);
    else kids[0] = jsonschema_any_object(g);
    kids[1] = chat_lit(g, EOM);
    if (!rc) rc = grammar_finish(g, gb_seq(g, kids, 2), where, vocab);
    if (rc) {
        grammar_free(g);
        *out = NULL;
        return -1;
    }
    *out = g;
    return 0;
}

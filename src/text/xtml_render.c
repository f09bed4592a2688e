/* xtml_render.c - conversation -> segments -> ids or text (see xtml.h). */
#include <stdio.h>
#include <string.h>

#include "text/pyjson.h"
#include "text/strbuf.h"
#include "text/utf8.h"
#include "text/xtml.h"

#define OPEN "<|open|>"
#define SEP "<|sep|>"
#define CLOSE "<|close|>"
#define EOM "<|end_of_msg|>"
#define IMAGE_PLACEHOLDER "<|kimi_image_placeholder|>"

static const char TOOLS_HEAD[] = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
static const char TOOLS_TAIL[] = "\n```";
static const char EFFORT_TEXT[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
    "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=%s`.";

/* Where segments go: encoded into ids, or concatenated into text. */
typedef struct Render {
    int (*sink)(struct Render *r, const char *s, size_t n, int trusted);
    const Tokenizer *tok;
    TokIds *ids;
    StrBuf *text;
    const XtmlOptions *opt;
} Render;

typedef struct {
    const char *key, *value;
    size_t len;
} Attr;

static int seg(Render *r, const char *s, size_t n, int trusted) { return n ? r->sink(r, s, n, trusted) : 0; }
static int text(Render *r, const char *s) { return seg(r, s, strlen(s), 0); }
static int marker(Render *r, const char *s) { return seg(r, s, strlen(s), 1); }

/* escape(value): "&" -> "&amp;", then "\"" -> "&quot;" (one pass gives the same result). */
static void escape(const char *s, size_t n, StrBuf *out) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&') sb_adds(out, "&amp;");
        else if (s[i] == '"') sb_adds(out, "&quot;");
        else sb_add(out, &s[i], 1);
    }
}

static int open_el(Render *r, const char *tag, const Attr *a, int n_attrs) {
    int rc = marker(r, OPEN) || text(r, tag);
    StrBuf key = {0}, val = {0};
    for (int i = 0; i < n_attrs && !rc; i++) {
        key.n = val.n = 0;
        sb_adds(&key, " "), sb_adds(&key, a[i].key);
        escape(a[i].value, a[i].len, &val);
        rc = seg(r, key.p, key.n, 0) || text(r, "=\"") || seg(r, val.p ? val.p : "", val.n, 0) || text(r, "\"");
    }
    sb_free(&key), sb_free(&val);
    return rc || marker(r, SEP);
}

static int close_el(Render *r, const char *tag) { return marker(r, CLOSE) || text(r, tag) || marker(r, SEP); }

static Attr attr(const char *key, const char *value) { return (Attr){key, value, strlen(value)}; }

static Attr attr_json(const char *key, const json_t *s) {
    return (Attr){key, json_string_value(s), json_string_length(s)};
}

/* An internal system message (tool declarations, effort): its body is trimmed. */
static int system_message(Render *r, const char *type, const char *body, size_t n) {
    size_t start;
    n = utf8_pystrip((const uint8_t *)body, n, &start);
    body += start;
    Attr a[2] = {attr("role", "system"), attr("type", type)};
    return open_el(r, "message", a, 2) || seg(r, body, n, 0) || close_el(r, "message") || marker(r, EOM);
}

static int tool_declarations(Render *r, const json_t *tools) {
    StrBuf b = {0};
    sb_adds(&b, TOOLS_HEAD);
    pyjson_dump(tools, PYJSON_COMPACT, 1, &b);
    sb_adds(&b, TOOLS_TAIL);
    int rc = system_message(r, "tool-declare", b.p, b.n);
    sb_free(&b);
    return rc;
}

static int effort_message(Render *r, const char *effort) {
    if (strcmp(effort, "low") && strcmp(effort, "high") && strcmp(effort, "max"))
        return df_fail("thinking effort '%s' is not supported (use low, high or max)", effort);
    char body[sizeof EFFORT_TEXT + 8];
    int n = snprintf(body, sizeof body, EFFORT_TEXT, effort);
    return system_message(r, "thinking-effort", body, (size_t)n);
}

/* Message content: a string, null, or parts; text parts join into one segment, split only
 * around image placeholders. */
static int content(Render *r, const json_t *c, int mi) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return seg(r, json_string_value(c), json_string_length(c), 0);
    if (!json_is_array(c)) return df_fail("messages[%d].content: must be a string, an array of parts or null", mi);
    StrBuf b = {0};
    int rc = 0;
    for (size_t i = 0; i < json_array_size(c) && !rc; i++) {
        const json_t *part = json_array_get(c, i), *t = json_object_get(part, "type");
        const char *type = json_is_string(t) ? json_string_value(t) : "";
        if (!strcmp(type, "text")) {
            const json_t *s = json_object_get(part, "text");
            if (!json_is_string(s)) rc = df_fail("messages[%d].content[%zu].text: missing or not a string", mi, i);
            else sb_add(&b, json_string_value(s), json_string_length(s));
        } else if (!strcmp(type, "image_url") || !strcmp(type, "image")) {
            rc = seg(r, b.p, b.n, 0) || marker(r, IMAGE_PLACEHOLDER);
            b.n = 0;
        } else
            rc = df_fail("messages[%d].content[%zu]: part type '%s' is not supported (text, image_url)", mi, i, type);
    }
    if (!rc) rc = seg(r, b.p, b.n, 0);
    sb_free(&b);
    return rc;
}

static int is_blank(const char *s, size_t n) {
    size_t start;
    return utf8_pystrip((const uint8_t *)s, n, &start) == 0;
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    }
    return "null";
}

/* One argument element per key of a JSON object; anything else is one raw json element. */
static int call_arguments(Render *r, const char *args, size_t n) {
    json_t *obj = json_loadb(args, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    int rc = 0;
    if (!json_is_object(obj)) {
        Attr a = attr("type", "object");
        rc = open_el(r, "json", &a, 1) || seg(r, args, n, 0) || close_el(r, "json");
        json_decref(obj);
        return rc;
    }
    const char *key;
    json_t *v;
    StrBuf b = {0};
    json_object_foreach(obj, key, v) {
        Attr a[2] = {attr("key", key), attr("type", json_type_name(v))};
        b.n = 0;
        if (json_is_string(v)) sb_add(&b, json_string_value(v), json_string_length(v));
        else pyjson_dump(v, PYJSON_SPACED, 0, &b);
        if ((rc = open_el(r, "argument", a, 2) || seg(r, b.p, b.n, 0) || close_el(r, "argument"))) break;
    }
    sb_free(&b);
    json_decref(obj);
    return rc;
}

static int tool_call(Render *r, const json_t *call, int mi, size_t k) {
    const json_t *fn = json_object_get(call, "function");
    const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name))
        return df_fail("messages[%d].tool_calls[%zu].function.name: missing or not a string", mi, k);
    char index[24];
    snprintf(index, sizeof index, "%zu", k + 1);
    Attr a[2] = {attr_json("tool", name), attr("index", index)};
    if (open_el(r, "call", a, 2)) return -1;
    int rc;
    if (json_is_string(args)) rc = call_arguments(r, json_string_value(args), json_string_length(args));
    else if (json_is_object(args)) { /* already parsed by the client: render it as its JSON text */
        StrBuf b = {0};
        pyjson_dump(args, PYJSON_SPACED, 0, &b);
        rc = call_arguments(r, b.p, b.n);
        sb_free(&b);
    } else
        rc = df_fail("messages[%d].tool_calls[%zu].function.arguments: must be a JSON string", mi, k);
    return rc || close_el(r, "call");
}

static int assistant(Render *r, const json_t *m, int mi) {
    Attr role = attr("role", "assistant");
    if (open_el(r, "message", &role, 1)) return -1;
    if (r->opt->thinking) {
        const json_t *reason = json_object_get(m, "reasoning_content");
        if (reason && !json_is_null(reason) && !json_is_string(reason))
            return df_fail("messages[%d].reasoning_content: must be a string", mi);
        const char *s = json_string_value(reason);
        size_t n = s ? json_string_length(reason) : 0;
        if (open_el(r, "think", NULL, 0) || (!is_blank(s, n) && seg(r, s, n, 0)) || close_el(r, "think")) return -1;
    }
    if (open_el(r, "response", NULL, 0) || content(r, json_object_get(m, "content"), mi) || close_el(r, "response"))
        return -1;
    const json_t *calls = json_object_get(m, "tool_calls");
    if (calls && !json_is_null(calls) && !json_is_array(calls))
        return df_fail("messages[%d].tool_calls: must be an array", mi);
    if (json_array_size(calls)) {
        if (open_el(r, "tools", NULL, 0)) return -1;
        for (size_t k = 0; k < json_array_size(calls); k++)
            if (tool_call(r, json_array_get(calls, k), mi, k)) return -1;
        if (close_el(r, "tools")) return -1;
    }
    return close_el(r, "message") || marker(r, EOM);
}

static int plain_message(Render *r, const json_t *m, const char *role, int mi) {
    Attr a[2] = {attr("role", role)};
    int n = 1;
    const json_t *name = json_object_get(m, "name");
    if (name && !json_is_null(name)) {
        if (!json_is_string(name)) return df_fail("messages[%d].name: must be a string", mi);
        a[n++] = attr_json("name", name);
    }
    return open_el(r, "message", a, n) || content(r, json_object_get(m, "content"), mi) ||
           close_el(r, "message") || marker(r, EOM);
}

/* A tool result with its call's name and 1-based index. */
static int tool_result(Render *r, const json_t *m, const json_t *name, size_t index, int mi) {
    char idx[24];
    snprintf(idx, sizeof idx, "%zu", index);
    Attr a[3] = {attr("role", "tool"), attr_json("tool", name), attr("index", idx)};
    return open_el(r, "message", a, 3) || content(r, json_object_get(m, "content"), mi) ||
           close_el(r, "message") || marker(r, EOM);
}

/* The index in calls of the call a tool message answers, or -1 with a message. */
static long match_call(const json_t *calls, const json_t *m, int mi) {
    const json_t *id = json_object_get(m, "tool_call_id");
    if (!json_is_string(id)) return df_fail("messages[%d].tool_call_id: missing or not a string", mi);
    for (size_t k = 0; k < json_array_size(calls); k++)
        if (json_equal(json_object_get(json_array_get(calls, k), "id"), (json_t *)id)) return (long)k;
    return df_fail("messages[%d].tool_call_id: '%s' matches no call of the preceding assistant message", mi,
                   json_string_value(id));
}

/* Tool messages msgs[first..last) after an assistant message that made no calls: in their own
 * order, each naming its tool. */
static int tool_run_unmatched(Render *r, const json_t *msgs, size_t first, size_t last) {
    for (size_t i = first; i < last; i++) {
        const json_t *m = json_array_get(msgs, i), *name = json_object_get(m, "name");
        if (!json_is_string(name)) return df_fail("messages[%zu].name: a tool message needs the name of its tool", i);
        if (tool_result(r, m, name, i - first + 1, (int)i)) return -1;
    }
    return 0;
}

/* Tool messages msgs[first..last): in the order of the preceding assistant's calls when it made
 * any, named and indexed after the call each answers. */
static int tool_run(Render *r, const json_t *msgs, size_t first, size_t last) {
    const json_t *calls = json_object_get(first > 0 ? json_array_get(msgs, first - 1) : NULL, "tool_calls");
    if (!json_array_size(calls)) return tool_run_unmatched(r, msgs, first, last);
    for (size_t i = first; i < last; i++)
        if (match_call(calls, json_array_get(msgs, i), (int)i) < 0) return -1;
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *name = json_object_get(json_object_get(json_array_get(calls, k), "function"), "name");
        for (size_t i = first; i < last; i++) {
            const json_t *m = json_array_get(msgs, i);
            if ((size_t)match_call(calls, m, (int)i) != k) continue;
            if (!json_is_string(name)) return df_fail("messages[%zu].tool_calls[%zu]: no function name", first - 1, k);
            if (tool_result(r, m, name, k + 1, (int)i)) return -1;
        }
    }
    return 0;
}

static const char *role_of(const json_t *m, size_t i) {
    const json_t *role = json_object_get(m, "role");
    if (!json_is_object(m) || !json_is_string(role)) {
        df_fail("messages[%zu]: must be an object with a string role", i);
        return NULL;
    }
    return json_string_value(role);
}

static int is_tool(const json_t *m) {
    const json_t *role = json_object_get(m, "role");
    return json_is_string(role) && !strcmp(json_string_value(role), "tool");
}

static int messages(Render *r, const json_t *msgs) {
    for (size_t i = 0; i < json_array_size(msgs);) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = role_of(m, i);
        if (!role) return -1;
        int rc;
        if (!strcmp(role, "tool")) { /* a run of tool results is rendered together */
            size_t j = i + 1;
            while (j < json_array_size(msgs) && is_tool(json_array_get(msgs, j))) j++;
            if (tool_run(r, msgs, i, j)) return -1;
            i = j;
            continue;
        }
        if (!strcmp(role, "assistant")) rc = assistant(r, m, (int)i);
        else if (!strcmp(role, "user") || !strcmp(role, "system")) {
            if (json_object_get(m, "tools"))
                return df_fail("messages[%zu].tools: tools announced inside a system message are not supported", i);
            rc = plain_message(r, m, role, (int)i);
        } else
            return df_fail("messages[%zu].role: '%s' is not supported (system, user, assistant, tool)", i, role);
        if (rc) return -1;
        i++;
    }
    return 0;
}

static int render(Render *r, const json_t *msgs) {
    const XtmlOptions *o = r->opt;
    if (!json_is_array(msgs)) return df_fail("messages: must be a JSON array");
    if (o->tools && !json_is_null(o->tools) && !json_is_array(o->tools)) return df_fail("tools: must be a JSON array");
    if (json_array_size(o->tools) && tool_declarations(r, o->tools)) return -1;
    if (o->thinking && effort_message(r, o->effort ? o->effort : "max")) return -1;
    if (messages(r, msgs)) return -1;
    if (!o->gen_prompt) return 0;
    Attr role = attr("role", "assistant");
    return open_el(r, "message", &role, 1) || open_el(r, o->thinking ? "think" : "response", NULL, 0);
}

static int sink_ids(Render *r, const char *s, size_t n, int trusted) {
    return tok_encode(r->tok, s, n, trusted, r->ids);
}

static int sink_text(Render *r, const char *s, size_t n, int trusted) {
    (void)trusted;
    sb_add(r->text, s, n);
    return 0;
}

int xtml_render(const Tokenizer *tok, const json_t *msgs, const XtmlOptions *opt, TokIds *out) {
    static const char *const needed[] = {OPEN, SEP, CLOSE, EOM};
    for (int i = 0; i < 4; i++)
        if (tok_special_id(tok, needed[i]) < 0)
            return df_fail("tokenizer has no special token %s: not a K3 vocabulary", needed[i]);
    Render r = {.sink = sink_ids, .tok = tok, .ids = out, .opt = opt};
    return render(&r, msgs);
}

char *xtml_render_text(const json_t *msgs, const XtmlOptions *opt, size_t *len) {
    StrBuf b = {0};
    Render r = {.sink = sink_text, .text = &b, .opt = opt};
    if (render(&r, msgs)) {
        sb_free(&b);
        return NULL;
    }
    sb_add(&b, "", 0);
    if (len) *len = b.n;
    return b.p;
}

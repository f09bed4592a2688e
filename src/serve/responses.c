/* responses.c - the Responses API: request translation, response objects and stream events
 * (see responses.h). */
#include "serve/responses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define MAX_TOKENS_LIMIT (1 << 24)

/* --- requests --- */

typedef struct {
    ApiRequest *r;
    ApiError *err;
    json_t *messages, *tools; /* what the renderer gets (owned by r->owned) */
    StrBuf reasoning;         /* reasoning items waiting for the assistant message they belong to */
} Translation;

static int bad(Translation *t, const char *key, const char *what) {
    return api_invalid(t->err, "invalid_value", key, "Invalid '%s': %s.", key, what);
}

/* The text of a message's content: a string, or parts of the kinds allowed ("input_text", or
 * "output_text" for an assistant's), joined. */
static int content_text(Translation *t, const json_t *content, const char *key, int assistant, StrBuf *out) {
    if (json_is_string(content)) return sb_add(out, json_string_value(content), json_string_length(content)), 0;
    if (!json_is_array(content)) return api_wrong_type(t->err, key, "a string or an array of content parts", content);
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i), *text = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        char k[160];
        snprintf(k, sizeof k, "%s[%zu]", key, i);
        if (!json_is_object(part) || !type) return api_wrong_type(t->err, k, "a content part with a 'type'", part);
        int ok = !strcmp(type, assistant ? "output_text" : "input_text") || !strcmp(type, "input_text") ||
                 (assistant && !strcmp(type, "refusal"));
        if (!ok) return api_unsupported(t->err, k, "only text parts are supported (no images, files or audio)");
        if (!strcmp(type, "refusal")) text = json_object_get(part, "refusal");
        if (!json_is_string(text)) return api_wrong_type(t->err, k, "a part with a string 'text'", text);
        sb_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

/* The assistant message that calls and reasoning attach to: the last one when it is the last
 * message, else a new empty one. */
static json_t *assistant_turn(Translation *t) {
    json_t *last = json_array_get(t->messages, json_array_size(t->messages) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!last || !role || strcmp(role, "assistant")) {
        last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        json_array_append_new(t->messages, last);
    }
    if (t->reasoning.n) {
        json_object_set_new(last, "reasoning_content", json_stringn(t->reasoning.p, t->reasoning.n));
        t->reasoning.n = 0;
    }
    return last;
}

static int message_item(Translation *t, const json_t *item, const char *key) {
    const char *role = json_string_value(json_object_get(item, "role"));
    char k[128];
    snprintf(k, sizeof k, "%s.role", key);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
        return bad(t, k, "the role must be user, assistant, system or developer");
    int assistant = !strcmp(role, "assistant");
    StrBuf text = {0};
    snprintf(k, sizeof k, "%s.content", key);
    if (content_text(t, json_object_get(item, "content"), k, assistant, &text)) return sb_free(&text), -1;
    if (assistant) {
        json_t *turn = json_pack("{s:s, s:s%}", "role", "assistant", "content", text.p ? text.p : "", text.n);
        json_array_append_new(t->messages, turn);
        assistant_turn(t);
    } else
        json_array_append_new(t->messages, json_pack("{s:s, s:s%}", "role", !strcmp(role, "user") ? "user" : "system",
                                                     "content", text.p ? text.p : "", text.n));
    sb_free(&text);
    return 0;
}

static int call_item(Translation *t, const json_t *item, const char *key) {
    const char *id = json_string_value(json_object_get(item, "call_id")), *name = json_string_value(json_object_get(item, "name"));
    const char *args = json_string_value(json_object_get(item, "arguments"));
    if (!id || !name || !args) return bad(t, key, "a function_call needs string 'call_id', 'name' and 'arguments'");
    json_t *turn = assistant_turn(t), *calls = json_object_get(turn, "tool_calls");
    if (!calls) json_object_set_new(turn, "tool_calls", calls = json_array());
    json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name,
                                           "arguments", args));
    return 0;
}

static int output_item(Translation *t, const json_t *item, const char *key) {
    const char *id = json_string_value(json_object_get(item, "call_id"));
    const json_t *output = json_object_get(item, "output");
    char k[128];
    snprintf(k, sizeof k, "%s.output", key);
    if (!id) return bad(t, key, "a function_call_output needs a string 'call_id'");
    StrBuf text = {0};
    if (content_text(t, output, k, 0, &text)) return sb_free(&text), -1;
    json_array_append_new(t->messages,
                          json_pack("{s:s, s:s, s:s%}", "role", "tool", "tool_call_id", id, "content", text.p ? text.p : "", text.n));
    sb_free(&text);
    return 0;
}

/* A reasoning item of an earlier turn: its text (content, else summary) goes with the assistant
 * message after it. */
static int reasoning_item(Translation *t, const json_t *item, const char *key) {
    const json_t *parts = json_object_get(item, "content");
    if (!json_array_size(parts)) parts = json_object_get(item, "summary");
    if (parts && !json_is_array(parts)) return bad(t, key, "a reasoning item's content and summary are arrays");
    for (size_t i = 0; i < json_array_size(parts); i++) {
        const json_t *text = json_object_get(json_array_get(parts, i), "text");
        if (!json_is_string(text)) return bad(t, key, "each reasoning part needs a string 'text'");
        sb_add(&t->reasoning, json_string_value(text), json_string_length(text));
    }
    return 0;
}

static int translate_input(Translation *t) {
    const json_t *input = api_field(t->r->root, "input");
    if (!input) return api_invalid(t->err, "missing_required_parameter", "input", "Missing required parameter: 'input'.");
    if (json_is_string(input)) {
        json_array_append_new(t->messages, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input) || !json_array_size(input)) return api_wrong_type(t->err, "input", "a string or a non-empty array of items", input);
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *item = json_array_get(input, i);
        char key[48];
        snprintf(key, sizeof key, "input[%zu]", i);
        if (!json_is_object(item)) return api_wrong_type(t->err, key, "an object", item);
        const char *type = json_string_value(json_object_get(item, "type"));
        int rc;
        if (!type || !strcmp(type, "message")) rc = message_item(t, item, key);
        else if (!strcmp(type, "function_call")) rc = call_item(t, item, key);
        else if (!strcmp(type, "function_call_output")) rc = output_item(t, item, key);
        else if (!strcmp(type, "reasoning")) rc = reasoning_item(t, item, key);
        else {
            snprintf(key, sizeof key, "input[%zu].type", i);
            rc = api_unsupported(t->err, key, "only message, function_call, function_call_output and reasoning items");
        }
        if (rc) return -1;
    }
    const char *last = json_string_value(json_object_get(json_array_get(t->messages, json_array_size(t->messages) - 1), "role"));
    if (last && !strcmp(last, "assistant"))
        return api_unsupported(t->err, "input", "the last item must be the user's (or a function_call_output): continuing "
                                                "a prefilled assistant reply is not supported");
    return 0;
}

/* tools: function tools, flat ({"type": "function", "name", ...}) as the Responses API has them. */
static int translate_tools(Translation *t) {
    const json_t *tools = api_field(t->r->root, "tools");
    if (!tools) return 0;
    if (!json_is_array(tools)) return api_wrong_type(t->err, "tools", "an array", tools);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *tool = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(tool, "type"));
        char key[48];
        snprintf(key, sizeof key, "tools[%zu].type", i);
        if (!json_is_object(tool) || !type) return api_wrong_type(t->err, key, "a string", json_object_get(tool, "type"));
        if (strcmp(type, "function")) return api_unsupported(t->err, key, "only function tools (no hosted tools)");
        json_t *fn = json_deep_copy(tool);
        json_object_del(fn, "type");
        json_array_append_new(t->tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    if (json_array_size(t->tools)) t->r->tools = t->tools;
    return 0;
}

/* tool_choice: the chat endpoint's strings, or {"type": "function", "name"}. */
static int translate_tool_choice(Translation *t) {
    const json_t *tc = api_field(t->r->root, "tool_choice");
    if (!tc) return 0;
    if (json_is_string(tc)) {
        t->r->tool_choice = tc;
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type")), *name = json_string_value(json_object_get(tc, "name"));
    if (!json_is_object(tc) || !type) return api_wrong_type(t->err, "tool_choice", "a string or an object with a 'type'", tc);
    if (strcmp(type, "function") || !name) return api_unsupported(t->err, "tool_choice", "a string or {\"type\": \"function\", \"name\": ...}");
    json_t *openai = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    json_object_set_new(t->r->owned, "tool_choice", openai);
    t->r->tool_choice = openai;
    return 0;
}

/* text.format: text, json_object, or json_schema (name, schema, strict) as response_format. */
static int translate_text(Translation *t) {
    const json_t *text = api_field(t->r->root, "text");
    if (!text) return 0;
    if (!json_is_object(text)) return api_wrong_type(t->err, "text", "an object", text);
    const json_t *format = api_field(text, "format");
    if (!format) return 0;
    const char *type = json_string_value(json_object_get(format, "type"));
    if (!json_is_object(format) || !type) return api_wrong_type(t->err, "text.format", "an object with a 'type'", format);
    json_t *rf;
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_deep_copy(format);
        json_object_del(js, "type");
        rf = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js);
    } else
        rf = json_pack("{s:s}", "type", type); /* text, json_object; others are refused with the grammar's message */
    json_object_set_new(t->r->owned, "response_format", rf);
    t->r->response_format = rf;
    return 0;
}

static int translate_reasoning(Translation *t) {
    const json_t *reasoning = api_field(t->r->root, "reasoning"), *effort;
    if (!reasoning) return 0;
    if (!json_is_object(reasoning)) return api_wrong_type(t->err, "reasoning", "an object", reasoning);
    if (!(effort = api_field(reasoning, "effort"))) return 0;
    if (!json_is_string(effort) || !(t->r->effort = k3_effort(json_string_value(effort))))
        return bad(t, "reasoning.effort", "use minimal, low, medium or high");
    return 0;
}

/* Fields this server cannot honour: refused by name (unless they ask for nothing). */
static int check_unsupported(Translation *t) {
    static const struct {
        const char *key, *what;
    } refused[] = {
        {"previous_response_id", "this server keeps no responses: send the whole conversation in 'input'"},
        {"conversation", "this server keeps no conversations: send the whole conversation in 'input'"},
        {"prompt", "prompt templates are not supported"},
        {"max_tool_calls", "not implemented (use parallel_tool_calls false for at most one call)"},
    };
    const json_t *root = t->r->root, *v;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (api_field(root, refused[i].key)) return api_unsupported(t->err, refused[i].key, refused[i].what);
    int background = 0;
    if (api_get_bool(t->err, root, "background", &background)) return -1;
    if (background) return api_unsupported(t->err, "background", "background responses are not supported");
    if ((v = api_field(root, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return api_unsupported(t->err, "top_logprobs", "log-probabilities are not available on this endpoint (use /v1/chat/completions)");
    if ((v = api_field(root, "truncation")) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return api_unsupported(t->err, "truncation", "only \"disabled\" (a conversation that does not fit is refused)");
    if ((v = api_field(root, "include")) && !json_is_array(v)) return api_wrong_type(t->err, "include", "an array of strings", v);
    return 0;
}

static int check_fields(Translation *t, const char *model_id) {
    ApiRequest *r = t->r;
    const json_t *root = r->root, *v;
    if (api_check_model(root, model_id, 0, t->err) || check_unsupported(t) || api_get_bool(t->err, root, "stream", &r->stream) ||
        api_get_int(t->err, root, "max_output_tokens", 1, MAX_TOKENS_LIMIT, &r->max_tokens) ||
        api_get_number(t->err, root, "temperature", -INFINITY, INFINITY, &r->sample.temperature) ||
        api_get_number(t->err, root, "top_p", 0, 1, &r->sample.top_p) || api_check_bookkeeping(r, t->err))
        return -1;
    api_sampling_defaults(r, api_field(root, "temperature") != NULL);
    if (api_check_sampling(r, t->err)) return -1;
    if ((v = api_field(root, "instructions"))) {
        if (!json_is_string(v)) return api_wrong_type(t->err, "instructions", "a string", v);
        json_array_append_new(t->messages, json_pack("{s:s, s:O}", "role", "system", "content", v));
    }
    return 0;
}

/* What the response object repeats of the request: its field, or dflt (taken over) when absent. */
static void echo_field(json_t *e, const json_t *root, const char *key, json_t *dflt) {
    const json_t *v = api_field(root, key);
    if (v) json_object_set(e, key, (json_t *)v), json_decref(dflt);
    else json_object_set_new(e, key, dflt);
}

static json_t *echo_of(const ApiRequest *r) {
    const json_t *root = r->root;
    json_t *e = json_object();
    echo_field(e, root, "instructions", json_null());
    echo_field(e, root, "tools", json_array());
    echo_field(e, root, "tool_choice", json_string("auto"));
    echo_field(e, root, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    echo_field(e, root, "metadata", json_object());
    const json_t *effort = json_object_get(api_field(root, "reasoning"), "effort");
    json_object_set_new(e, "reasoning", json_pack("{s:O?, s:n}", "effort", json_is_string(effort) ? effort : NULL, "summary"));
    json_object_set_new(e, "parallel_tool_calls", json_boolean(r->parallel_tool_calls));
    json_object_set_new(e, "temperature", json_real(r->sample.temperature));
    json_object_set_new(e, "top_p", json_real(r->sample.top_p));
    json_object_set_new(e, "max_output_tokens", r->max_tokens >= 0 ? json_integer(r->max_tokens) : json_null());
    return e;
}

int responses_request_parse(const char *body, size_t len, const char *model_id, ApiRequest *r, ApiError *err) {
    if (api_translated_begin(r, body, len, err)) return -1;
    r->responses = 1;
    Translation t = {r, err, json_object_get(r->owned, "messages"), json_object_get(r->owned, "tools"), {0}};
    int rc = -1;
    if (!check_fields(&t, model_id) && !translate_input(&t) && !translate_tools(&t) && !translate_tool_choice(&t) &&
             !translate_text(&t) && !translate_reasoning(&t))
        rc = 0;
    sb_free(&t.reasoning);
    r->messages = t.messages;
    if (!rc) r->echo = echo_of(r);
    if (rc) api_request_free(r);
    return rc;
}

/* --- answers --- */

static char *dump(json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    return s ? s : df_strdup("{}");
}

/* An item id: the response's own ("resp_X") with another prefix ("msg_X", "rs_X"; calls add
 * their index: "fc_X_0"). */
static json_t *item_id(const WireHead *h, const char *prefix, long index) {
    const char *sep = strchr(h->id, '_');
    char id[96];
    if (index < 0) snprintf(id, sizeof id, "%s_%s", prefix, sep ? sep + 1 : h->id);
    else snprintf(id, sizeof id, "%s_%s_%ld", prefix, sep ? sep + 1 : h->id, index);
    return json_string(id);
}

static json_t *reasoning_item_of(const WireHead *h, const char *text, size_t len) {
    return json_pack("{s:s, s:o, s:[], s:[{s:s, s:s%}], s:s}", "type", "reasoning", "id", item_id(h, "rs", -1), "summary",
                     "content", "type", "reasoning_text", "text", text ? text : "", len, "status", "completed");
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text ? text : "", len, "annotations", "logprobs");
}

static json_t *message_item_of(const WireHead *h, const char *text, size_t len, const char *status) {
    return json_pack("{s:s, s:o, s:s, s:s, s:[o]}", "type", "message", "id", item_id(h, "msg", -1), "status", status, "role",
                     "assistant", "content", text_part(text, len));
}

static json_t *call_item_of(const WireHead *h, const json_t *call, size_t i, int done) {
    const json_t *fn = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(fn, "name")), *args = json_string_value(json_object_get(fn, "arguments"));
    char call_id[96];
    snprintf(call_id, sizeof call_id, "call_%s_%zu", h->id, i);
    return json_pack("{s:s, s:o, s:s, s:s, s:s, s:s}", "type", "function_call", "id", item_id(h, "fc", (long)i), "call_id",
                     call_id, "name", name ? name : "", "arguments", done && args ? args : "", "status",
                     done ? "completed" : "in_progress");
}

static json_t *usage_of(const WireUsage *u) {
    return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", u->prompt, "input_tokens_details", "cached_tokens",
                     u->cached, "output_tokens", u->completion, "output_tokens_details", "reasoning_tokens", u->reasoning,
                     "total_tokens", u->prompt + u->completion);
}

/* The response object around output: status, the request's echo, usage (NULL: null). */
static json_t *response_of(const WireHead *h, const json_t *echo, json_t *output, const char *status, const WireUsage *u) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:s, s:o, s:b, s:n}", "id", h->id, "object", "response", "created_at",
                          (json_int_t)h->created, "status", status, "incomplete_details", "error", "model", h->model, "output",
                          output, "store", 0, "previous_response_id");
    if (!strcmp(status, "incomplete")) json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_update_missing(o, (json_t *)echo);
    json_object_set_new(o, "usage", u ? usage_of(u) : json_null());
    return o;
}

static const char *status_of(const ResponsesAnswer *a) { return !strcmp(a->finish, "length") ? "incomplete" : "completed"; }

/* The output items: the reasoning, the answer (also when empty, unless calls were made), the
 * calls. */
static json_t *output_of(const WireHead *h, const ResponsesAnswer *a) {
    json_t *out = json_array();
    if (a->reasoning_len) json_array_append_new(out, reasoning_item_of(h, a->reasoning, a->reasoning_len));
    if (a->content_len || !json_array_size(a->tool_calls))
        json_array_append_new(out, message_item_of(h, a->content, a->content_len, status_of(a)));
    for (size_t i = 0; i < json_array_size(a->tool_calls); i++) json_array_append_new(out, call_item_of(h, json_array_get(a->tool_calls, i), i, 1));
    return out;
}

char *responses_object(const WireHead *h, const ResponsesAnswer *a, const WireUsage *u) {
    return dump(response_of(h, a->echo, output_of(h, a), status_of(a), u));
}

/* "event: TYPE\ndata: {...}\n\n", with the type and sequence number added to data. */
static void event(ResponsesStream *st, StrBuf *out, const char *type, json_t *data) {
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(st->seq++));
    char *body = dump(data);
    sb_adds(out, "event: ");
    sb_adds(out, type);
    sb_adds(out, "\ndata: ");
    sb_adds(out, body);
    sb_adds(out, "\n\n");
    free(body);
}

void responses_stream_start(ResponsesStream *st, StrBuf *out, const WireHead *h, const json_t *echo) {
    memset(st, 0, sizeof *st);
    event(st, out, "response.created", json_pack("{s:o}", "response", response_of(h, echo, json_array(), "in_progress", NULL)));
    event(st, out, "response.in_progress", json_pack("{s:o}", "response", response_of(h, echo, json_array(), "in_progress", NULL)));
}

/* The open item's id (for its part events). */
static json_t *open_id(const WireHead *h, const ResponsesStream *st) { return item_id(h, st->open == 1 ? "rs" : "msg", -1); }

static void close_item(ResponsesStream *st, StrBuf *out, const WireHead *h) {
    if (!st->open) return;
    int index = st->items - 1;
    const char *text = st->text.p ? st->text.p : "";
    size_t n = st->text.n;
    if (st->open == 1) {
        event(st, out, "response.reasoning_text.done",
              json_pack("{s:o, s:i, s:i, s:s%}", "item_id", open_id(h, st), "output_index", index, "content_index", 0, "text", text, n));
        event(st, out, "response.content_part.done",
              json_pack("{s:o, s:i, s:i, s:{s:s, s:s%}}", "item_id", open_id(h, st), "output_index", index, "content_index", 0, "part",
                        "type", "reasoning_text", "text", text, n));
        event(st, out, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", index, "item", reasoning_item_of(h, text, n)));
    } else {
        event(st, out, "response.output_text.done",
              json_pack("{s:o, s:i, s:i, s:s%, s:[]}", "item_id", open_id(h, st), "output_index", index, "content_index", 0, "text",
                        text, n, "logprobs"));
        event(st, out, "response.content_part.done",
              json_pack("{s:o, s:i, s:i, s:o}", "item_id", open_id(h, st), "output_index", index, "content_index", 0, "part",
                        text_part(text, n)));
        event(st, out, "response.output_item.done",
              json_pack("{s:i, s:o}", "output_index", index, "item", message_item_of(h, text, n, "completed")));
    }
    st->open = 0;
    st->text.n = 0;
}

static void open_item(ResponsesStream *st, StrBuf *out, const WireHead *h, int kind) {
    close_item(st, out, h);
    st->open = kind;
    int index = st->items++;
    json_t *item = kind == 1 ? reasoning_item_of(h, "", 0) : message_item_of(h, "", 0, "in_progress");
    json_object_set_new(item, "status", json_string("in_progress"));
    if (kind == 1) json_object_set_new(item, "content", json_array());
    else json_object_set_new(item, "content", json_array()), st->said = 1;
    event(st, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", index, "item", item));
    json_t *part = kind == 1 ? json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "") : text_part("", 0);
    event(st, out, "response.content_part.added",
          json_pack("{s:o, s:i, s:i, s:o}", "item_id", open_id(h, st), "output_index", index, "content_index", 0, "part", part));
}

static void item_text(ResponsesStream *st, StrBuf *out, const WireHead *h, int kind, const char *text, size_t len) {
    if (!len) return;
    if (st->open != kind) open_item(st, out, h, kind);
    sb_add(&st->text, text, len);
    json_t *d = json_pack("{s:o, s:i, s:i, s:s%}", "item_id", open_id(h, st), "output_index", st->items - 1, "content_index", 0,
                          "delta", text, len);
    if (kind == 2) json_object_set_new(d, "logprobs", json_array());
    event(st, out, kind == 1 ? "response.reasoning_text.delta" : "response.output_text.delta", d);
}

void responses_stream_text(ResponsesStream *st, StrBuf *out, const WireHead *h, const char *reasoning, size_t reasoning_len,
                           const char *content, size_t content_len) {
    item_text(st, out, h, 1, reasoning, reasoning_len);
    item_text(st, out, h, 2, content, content_len);
}

void responses_stream_tool(ResponsesStream *st, StrBuf *out, const WireHead *h, size_t index, const json_t *call) {
    close_item(st, out, h);
    int at = st->items++;
    json_t *done = call_item_of(h, call, index, 1);
    event(st, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", at, "item", call_item_of(h, call, index, 0)));
    event(st, out, "response.function_call_arguments.delta",
          json_pack("{s:O, s:i, s:O}", "item_id", json_object_get(done, "id"), "output_index", at, "delta", json_object_get(done, "arguments")));
    event(st, out, "response.function_call_arguments.done",
          json_pack("{s:O, s:i, s:O, s:O}", "item_id", json_object_get(done, "id"), "output_index", at, "name",
                    json_object_get(done, "name"), "arguments", json_object_get(done, "arguments")));
    event(st, out, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", at, "item", done));
}

void responses_stream_end(ResponsesStream *st, StrBuf *out, const WireHead *h, const ResponsesAnswer *a, const WireUsage *u) {
    if (!st->said && !json_array_size(a->tool_calls)) open_item(st, out, h, 2); /* the (empty) answer, as the whole response has it */
    close_item(st, out, h);
    const char *status = status_of(a);
    event(st, out, !strcmp(status, "completed") ? "response.completed" : "response.incomplete",
          json_pack("{s:o}", "response", response_of(h, a->echo, output_of(h, a), status, u)));
    sb_free(&st->text);
}

void responses_stream_error(ResponsesStream *st, StrBuf *out, const ApiError *e) {
    event(st, out, "error", json_pack("{s:s?, s:s, s:s?}", "code", e->code, "message", e->message, "param", e->param[0] ? e->param : NULL));
    sb_free(&st->text);
}

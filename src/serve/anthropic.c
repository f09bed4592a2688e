/* anthropic.c - the Messages API: request translation, answers and stream events (see anthropic.h). */
#include "serve/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"

#define MAX_TOKENS_LIMIT (1 << 24)

/* --- requests --- */

typedef struct {
    ApiRequest *r;
    ApiError *err;
    json_t *messages, *tools; /* what the renderer gets (owned by r->owned) */
    const json_t *asked;      /* the tool_use blocks of the message before the one being read (borrowed), or NULL */
} Translation;

/* 1 when the assistant message before made a tool_use with this id. */
static int was_asked(const Translation *t, const char *id) {
    for (size_t i = 0; i < json_array_size(t->asked); i++) {
        const json_t *b = json_array_get(t->asked, i);
        const char *type = json_string_value(json_object_get(b, "type")), *bid = json_string_value(json_object_get(b, "id"));
        if (type && !strcmp(type, "tool_use") && bid && !strcmp(bid, id)) return 1;
    }
    return 0;
}

static int bad(Translation *t, const char *key, const char *fmt, const char *detail) {
    return api_invalid(t->err, "invalid_value", key, fmt, key, detail);
}

/* A block's "type", or NULL after a refusal. */
static const char *block_type(Translation *t, const json_t *block, const char *key) {
    if (!json_is_object(block)) return api_wrong_type(t->err, key, "a content block object", block), NULL;
    const char *type = json_string_value(json_object_get(block, "type"));
    if (!type) bad(t, key, "Invalid '%s': a content block needs a string 'type'%s.", "");
    return type;
}

static int text_of(Translation *t, const json_t *block, const char *key, const json_t **text) {
    char k[128];
    snprintf(k, sizeof k, "%s.text", key);
    *text = json_object_get(block, "text");
    return json_is_string(*text) ? 0 : api_wrong_type(t->err, k, "a string", *text);
}

/* A tool_result's content: a string or text blocks, joined. */
static int tool_result_text(Translation *t, const json_t *block, const char *key, StrBuf *out) {
    const json_t *c = json_object_get(block, "content");
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return sb_add(out, json_string_value(c), json_string_length(c)), 0;
    char k[128];
    snprintf(k, sizeof k, "%s.content", key);
    if (!json_is_array(c)) return api_wrong_type(t->err, k, "a string or an array of text blocks", c);
    for (size_t i = 0; i < json_array_size(c); i++) {
        char bk[160];
        snprintf(bk, sizeof bk, "%s[%zu]", k, i);
        const char *type = block_type(t, json_array_get(c, i), bk);
        if (!type) return -1;
        if (strcmp(type, "text")) return api_unsupported(t->err, bk, "only text in tool results (no images or documents)");
        const json_t *text;
        if (text_of(t, json_array_get(c, i), bk, &text)) return -1;
        sb_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

static int user_blocks(Translation *t, const json_t *blocks, size_t m) {
    json_t *parts = json_array();
    for (size_t i = 0; i < json_array_size(blocks); i++) {
        const json_t *b = json_array_get(blocks, i);
        char key[96];
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", m, i);
        const char *type = block_type(t, b, key);
        int rc = -1;
        if (!type) {
        } else if (!strcmp(type, "text")) {
            const json_t *text;
            if (!(rc = text_of(t, b, key, &text))) json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
        } else if (!strcmp(type, "tool_result")) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            StrBuf text = {0};
            char idkey[128];
            snprintf(idkey, sizeof idkey, "%s.tool_use_id", key);
            if (!id) bad(t, key, "Invalid '%s': a tool_result needs a string 'tool_use_id'%s.", "");
            else if (!was_asked(t, id))
                api_invalid(t->err, "invalid_value", idkey,
                            "Invalid '%s': '%.64s' answers no tool_use block of the assistant message just before it.",
                            idkey, id);
            else if (!(rc = tool_result_text(t, b, key, &text)))
                json_array_append_new(t->messages, json_pack("{s:s, s:s, s:s%}", "role", "tool", "tool_call_id", id, "content",
                                                             text.p ? text.p : "", text.n));
            sb_free(&text);
        } else
            api_unsupported(t->err, key, "only text and tool_result blocks in user messages (no images or documents)");
        if (rc) return json_decref(parts), -1;
    }
    if (json_array_size(parts)) json_array_append_new(t->messages, json_pack("{s:s, s:o}", "role", "user", "content", parts));
    else json_decref(parts);
    return 0;
}

static int tool_use_call(Translation *t, const json_t *b, const char *key, json_t *calls) {
    const char *id = json_string_value(json_object_get(b, "id")), *name = json_string_value(json_object_get(b, "name"));
    const json_t *input = json_object_get(b, "input");
    if (!id || !name || !json_is_object(input))
        return bad(t, key, "Invalid '%s': a tool_use needs string 'id' and 'name' and an object 'input'%s.", "");
    char *args = json_dumps(input, JSON_COMPACT);
    json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name,
                                           "arguments", args ? args : "{}"));
    free(args);
    return 0;
}

static int assistant_blocks(Translation *t, const json_t *blocks, size_t m) {
    StrBuf content = {0}, reasoning = {0};
    json_t *calls = json_array();
    int rc = 0;
    for (size_t i = 0; i < json_array_size(blocks) && !rc; i++) {
        const json_t *b = json_array_get(blocks, i), *text;
        char key[96];
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", m, i);
        const char *type = block_type(t, b, key);
        if (!type) rc = -1;
        else if (!strcmp(type, "text")) {
            if (!(rc = text_of(t, b, key, &text))) sb_add(&content, json_string_value(text), json_string_length(text));
        } else if (!strcmp(type, "thinking")) {
            text = json_object_get(b, "thinking");
            if (!json_is_string(text)) rc = bad(t, key, "Invalid '%s': a thinking block needs a string 'thinking'%s.", "");
            else sb_add(&reasoning, json_string_value(text), json_string_length(text));
        } else if (!strcmp(type, "tool_use"))
            rc = tool_use_call(t, b, key, calls);
        else
            rc = api_unsupported(t->err, key, "only text, thinking and tool_use blocks in assistant messages");
    }
    if (!rc) {
        json_t *msg = json_pack("{s:s, s:s%, s:s%}", "role", "assistant", "content", content.p ? content.p : "", content.n,
                                "reasoning_content", reasoning.p ? reasoning.p : "", reasoning.n);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(t->messages, msg);
    }
    json_decref(calls);
    sb_free(&content), sb_free(&reasoning);
    return rc;
}

static int translate_messages(Translation *t) {
    const json_t *msgs = api_field(t->r->root, "messages");
    if (!msgs) return api_invalid(t->err, "missing_required_parameter", "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs) || !json_array_size(msgs)) return api_wrong_type(t->err, "messages", "a non-empty array", msgs);
    for (size_t m = 0; m < json_array_size(msgs); m++) {
        const json_t *msg = json_array_get(msgs, m);
        char key[96];
        snprintf(key, sizeof key, "messages[%zu]", m);
        if (!json_is_object(msg)) return api_wrong_type(t->err, key, "an object", msg);
        const char *role = json_string_value(json_object_get(msg, "role"));
        snprintf(key, sizeof key, "messages[%zu].role", m);
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return bad(t, key, "Invalid '%s': the role must be user or assistant%s.", "");
        const json_t *content = json_object_get(msg, "content");
        snprintf(key, sizeof key, "messages[%zu].content", m);
        if (json_is_string(content))
            json_array_append_new(t->messages, json_pack("{s:s, s:O}", "role", role, "content", content));
        else if (!json_is_array(content))
            return api_wrong_type(t->err, key, "a string or an array of content blocks", content);
        else if (!strcmp(role, "user") ? user_blocks(t, content, m) : assistant_blocks(t, content, m))
            return -1;
        t->asked = !strcmp(role, "assistant") && json_is_array(content) ? content : NULL;
        if (m + 1 == json_array_size(msgs) && !strcmp(role, "assistant"))
            return api_unsupported(t->err, key, "the last message must be the user's: continuing a prefilled assistant "
                                                "reply is not supported");
    }
    return 0;
}

static int translate_system(Translation *t) {
    const json_t *sys = api_field(t->r->root, "system");
    if (!sys) return 0;
    StrBuf text = {0};
    if (json_is_string(sys)) sb_add(&text, json_string_value(sys), json_string_length(sys));
    else if (!json_is_array(sys)) return api_wrong_type(t->err, "system", "a string or an array of text blocks", sys);
    for (size_t i = 0; json_is_array(sys) && i < json_array_size(sys); i++) {
        char key[64];
        snprintf(key, sizeof key, "system[%zu]", i);
        const char *type = block_type(t, json_array_get(sys, i), key);
        const json_t *part;
        if (!type || (strcmp(type, "text") && api_unsupported(t->err, key, "only text blocks")) ||
            text_of(t, json_array_get(sys, i), key, &part))
            return sb_free(&text), -1;
        sb_add(&text, json_string_value(part), json_string_length(part));
    }
    json_array_insert_new(t->messages, 0, json_pack("{s:s, s:s%}", "role", "system", "content", text.p ? text.p : "", text.n));
    sb_free(&text);
    return 0;
}

/* tool_choice: auto (the model decides), any (at least one call), tool (calls of that one), none;
 * disable_parallel_tool_use: at most one call. In OpenAI's terms for the reply grammar. */
static int translate_tool_choice(Translation *t, const json_t *choice) {
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!json_is_object(choice) || !type) return api_wrong_type(t->err, "tool_choice", "an object with a 'type'", choice);
    const json_t *serial = json_object_get(choice, "disable_parallel_tool_use");
    if (serial && !json_is_boolean(serial)) return api_wrong_type(t->err, "tool_choice.disable_parallel_tool_use", "a boolean", serial);
    t->r->parallel_tool_calls = !json_is_true(serial);
    json_t *openai;
    if (!strcmp(type, "auto")) openai = json_string("auto");
    else if (!strcmp(type, "any")) openai = json_string("required");
    else if (!strcmp(type, "none")) openai = json_string("none");
    else if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(choice, "name"));
        if (!name) return bad(t, "tool_choice", "Invalid '%s': a tool choice of type tool needs a string 'name'%s.", "");
        openai = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    } else
        return bad(t, "tool_choice", "Invalid '%s': the type must be auto, any, tool or none%s.", "");
    json_object_set_new(t->r->owned, "tool_choice", openai);
    t->r->tool_choice = openai;
    return 0;
}

static int translate_tools(Translation *t) {
    const json_t *tools = api_field(t->r->root, "tools"), *choice = api_field(t->r->root, "tool_choice");
    if (tools && !json_is_array(tools)) return api_wrong_type(t->err, "tools", "an array", tools);
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        const json_t *tool = json_array_get(tools, i);
        char key[48];
        snprintf(key, sizeof key, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(tool, "type"));
        if (type && strcmp(type, "custom")) return api_unsupported(t->err, key, "only custom tools (no server tools)");
        const char *name = json_string_value(json_object_get(tool, "name"));
        const json_t *desc = json_object_get(tool, "description"), *schema = json_object_get(tool, "input_schema");
        if (!name || !json_is_object(schema) || (desc && !json_is_string(desc)))
            return bad(t, key, "Invalid '%s': a tool needs a string 'name' and an object 'input_schema'%s.", "");
        json_t *fn = json_pack("{s:s, s:O}", "name", name, "parameters", schema);
        if (desc) json_object_set(fn, "description", (json_t *)desc);
        json_array_append_new(t->tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    if (choice && translate_tool_choice(t, choice)) return -1;
    if (json_array_size(t->tools)) t->r->tools = t->tools;
    return 0;
}

/* output_config: effort (low, medium, high, max: as OpenAI's reasoning_effort) and format
 * ({"type": "json_schema", "schema"}: OpenAI's strict json_schema response_format). */
static int translate_output_config(Translation *t) {
    const json_t *oc = api_field(t->r->root, "output_config");
    if (!oc) return 0;
    if (!json_is_object(oc)) return api_wrong_type(t->err, "output_config", "an object", oc);
    const json_t *format = api_field(oc, "format"), *effort = api_field(oc, "effort");
    if (format) {
        const char *type = json_string_value(json_object_get(format, "type"));
        const json_t *schema = json_object_get(format, "schema");
        if (!json_is_object(format) || !type || strcmp(type, "json_schema") || !json_is_object(schema))
            return bad(t, "output_config.format", "Invalid '%s': expected {\"type\": \"json_schema\", \"schema\": {...}}%s.", "");
        json_t *rf = json_pack("{s:s, s:{s:s, s:O, s:b}}", "type", "json_schema", "json_schema", "name", "output", "schema",
                               schema, "strict", 1);
        json_object_set_new(t->r->owned, "response_format", rf);
        t->r->response_format = rf;
    }
    if (!effort) return 0;
    if (!json_is_string(effort) || !(t->r->effort = k3_effort(json_string_value(effort))))
        return bad(t, "output_config.effort", "Invalid '%s': use low, medium, high or max%s.", "");
    return 0;
}

/* thinking: K3 always thinks; the budget picks its effort level. */
static int translate_thinking(Translation *t) {
    const json_t *th = api_field(t->r->root, "thinking");
    if (!th) return 0;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type) return api_wrong_type(t->err, "thinking", "an object with a 'type'", th);
    if (!strcmp(type, "disabled")) {
        t->r->effort = "low";
        return 0;
    }
    if (!strcmp(type, "adaptive")) return 0;
    if (strcmp(type, "enabled")) return bad(t, "thinking", "Invalid '%s': the type must be enabled, disabled or adaptive%s.", "");
    int64_t budget = -1;
    if (api_get_int(t->err, th, "budget_tokens", 1, MAX_TOKENS_LIMIT, &budget)) return -1;
    t->r->effort = budget < 0 ? NULL : budget < 4096 ? "low" : budget < 16384 ? "high" : "max";
    return 0;
}

static int check_stop_sequences(Translation *t) {
    const json_t *v = api_field(t->r->root, "stop_sequences");
    if (!v) return 0;
    if (!json_is_array(v)) return api_wrong_type(t->err, "stop_sequences", "an array of strings", v);
    if (json_array_size(v) > 4) return bad(t, "stop_sequences", "Invalid '%s': at most 4 sequences%s.", "");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_string(e) || !json_string_length(e) || json_string_length(e) > 256)
            return bad(t, "stop_sequences", "Invalid '%s': each sequence is a string of 1..256 bytes%s.", "");
        t->r->stop[t->r->n_stop++] = e;
    }
    return 0;
}

static int check_fields(Translation *t, const char *model_id, int counting) {
    ApiRequest *r = t->r;
    const json_t *root = r->root, *v;
    if (api_check_model(root, model_id, 1, t->err)) return -1;
    if (!counting && !api_field(root, "max_tokens"))
        return api_invalid(t->err, "missing_required_parameter", "max_tokens", "max_tokens: Field required.");
    int64_t top_k = 0;
    if (api_get_int(t->err, root, "max_tokens", 1, MAX_TOKENS_LIMIT, &r->max_tokens) ||
        api_get_bool(t->err, root, "stream", &r->stream) ||
        api_get_number(t->err, root, "temperature", 0, 1, &r->sample.temperature) ||
        api_get_number(t->err, root, "top_p", 0, 1, &r->sample.top_p) ||
        api_get_int(t->err, root, "top_k", 0, 1 << 20, &top_k) || check_stop_sequences(t))
        return -1;
    r->sample.top_k = (int)top_k;
    api_sampling_defaults(r, api_field(root, "temperature") != NULL);
    if (api_check_sampling(r, t->err)) return -1;
    if ((v = api_field(root, "metadata"))) {
        const json_t *user = json_object_get(v, "user_id");
        if (!json_is_object(v) || (user && !json_is_null(user) && !json_is_string(user)))
            return api_wrong_type(t->err, "metadata", "an object with an optional string 'user_id'", v);
    }
    return 0;
}

int anthropic_request_parse(const char *body, size_t len, const char *model_id, int counting, ApiRequest *r, ApiError *err) {
    if (api_translated_begin(r, body, len, err)) return -1;
    r->anthropic = 1;
    Translation t = {r, err, json_object_get(r->owned, "messages"), json_object_get(r->owned, "tools"), NULL};
    int rc = -1;
    if (!check_fields(&t, model_id, counting) && !translate_messages(&t) && !translate_system(&t) && !translate_tools(&t) &&
             !translate_thinking(&t) && !translate_output_config(&t))
        rc = 0;
    r->messages = t.messages;
    if (rc) api_request_free(r);
    return rc;
}

/* --- answers --- */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 500: return "api_error";
    case 503: return "overloaded_error";
    default: return "invalid_request_error";
    }
}

static char *dump(json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    return s ? s : df_strdup("{}");
}

static json_t *error_object(const ApiError *e) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(e->status), "message", e->message);
}

char *anthropic_error(const ApiError *e) { return dump(error_object(e)); }

char *anthropic_models(const char *model, int64_t created, int one) {
    char when[32];
    time_t t = (time_t)created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *m = json_pack("{s:s, s:s, s:s, s:s}", "type", "model", "id", model, "display_name", model, "created_at", when);
    if (one) return dump(m);
    return dump(json_pack("{s:[o], s:b, s:s, s:s}", "data", m, "has_more", 0, "first_id", model, "last_id", model));
}

static const char *stop_reason(const AnthropicEnd *end) {
    if (!strcmp(end->finish, "length")) return "max_tokens";
    if (!strcmp(end->finish, "tool_calls")) return "tool_use";
    return end->stop_sequence ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const AnthropicEnd *end) {
    return end->stop_sequence ? json_stringn(end->stop_sequence, end->stop_len) : json_null();
}

static json_t *usage_object(const WireUsage *u, int output) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", u->prompt - u->cached, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", u->cached, "output_tokens", output);
}

static json_t *message_id(const WireHead *h) {
    const char *dash = strchr(h->id, '-');
    char id[64];
    snprintf(id, sizeof id, "msg_%s", dash ? dash + 1 : h->id);
    return json_string(id);
}

/* A call's tool_use block; its arguments (JSON text) become the input object. */
static json_t *tool_use_block(const WireHead *h, const json_t *call, size_t i, int streamed) {
    const json_t *fn = json_object_get(call, "function");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *input = args ? json_loads(args, 0, NULL) : NULL;
    if (!json_is_object(input)) { /* the model wrote something that is not an object: keep it whole */
        json_decref(input);
        input = json_pack("{s:s}", "arguments", args ? args : "");
    }
    const char *dash = strchr(h->id, '-');
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%zu", dash ? dash + 1 : h->id, i);
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (streamed) json_decref(input), input = json_object();
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", name ? name : "", "input", input);
}

char *anthropic_message(const WireHead *h, const char *reasoning, size_t reasoning_len, const char *content,
                        size_t content_len, const json_t *tool_calls, const AnthropicEnd *end, const WireUsage *u) {
    json_t *blocks = json_array();
    if (reasoning_len)
        json_array_append_new(blocks, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", reasoning, reasoning_len,
                                                "signature", ""));
    if (content_len)
        json_array_append_new(blocks, json_pack("{s:s, s:s%}", "type", "text", "text", content ? content : "", content_len));
    for (size_t i = 0; i < json_array_size(tool_calls); i++)
        json_array_append_new(blocks, tool_use_block(h, json_array_get(tool_calls, i), i, 0));
    json_t *msg = json_pack("{s:o, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", message_id(h), "type", "message", "role",
                            "assistant", "model", h->model, "content", blocks, "stop_reason", stop_reason(end),
                            "stop_sequence", stop_sequence(end), "usage", usage_object(u, u->completion));
    if (end->detail) json_object_set_new(msg, "finish_detail", json_string(end->detail));
    return dump(msg);
}

/* "event: NAME\ndata: {...}\n\n" */
static void event(StrBuf *out, const char *name, json_t *data) {
    char *body = dump(data);
    sb_adds(out, "event: ");
    sb_adds(out, name);
    sb_adds(out, "\ndata: ");
    sb_adds(out, body);
    sb_adds(out, "\n\n");
    free(body);
}

void anthropic_stream_start(AnthropicStream *st, StrBuf *out, const WireHead *h, const WireUsage *u) {
    st->index = 0, st->open = 0;
    json_t *msg = json_pack("{s:o, s:s, s:s, s:s, s:[], s:n, s:n, s:o}", "id", message_id(h), "type", "message", "role",
                            "assistant", "model", h->model, "content", "stop_reason", "stop_sequence", "usage",
                            usage_object(u, 0));
    event(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
}

static void close_block(AnthropicStream *st, StrBuf *out) {
    if (!st->open) return;
    if (st->open == 1) /* the signature Anthropic clients keep with a thinking block (none here) */
        event(out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index",
                                                    st->index, "delta", "type", "signature_delta", "signature", ""));
    event(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->index));
    st->index++;
    st->open = 0;
}

static void block_text(AnthropicStream *st, StrBuf *out, int kind, const char *text, size_t len) {
    if (!len) return;
    if (st->open != kind) {
        close_block(st, out);
        json_t *block = kind == 1 ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                                  : json_pack("{s:s, s:s}", "type", "text", "text", "");
        event(out, "content_block_start",
              json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", st->index, "content_block", block));
        st->open = kind;
    }
    json_t *delta = kind == 1 ? json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking", text, len)
                              : json_pack("{s:s, s:s%}", "type", "text_delta", "text", text, len);
    event(out, "content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", st->index, "delta", delta));
}

void anthropic_stream_text(AnthropicStream *st, StrBuf *out, const char *reasoning, size_t reasoning_len,
                           const char *content, size_t content_len) {
    block_text(st, out, 1, reasoning, reasoning_len);
    block_text(st, out, 2, content, content_len);
}

void anthropic_stream_tool(AnthropicStream *st, StrBuf *out, const WireHead *h, size_t index, const json_t *call) {
    close_block(st, out);
    json_t *block = tool_use_block(h, call, index, 1), *full = tool_use_block(h, call, index, 0);
    char *input = json_dumps(json_object_get(full, "input"), JSON_COMPACT);
    json_decref(full);
    event(out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", st->index,
                                                "content_block", block));
    event(out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", st->index,
                                                "delta", "type", "input_json_delta", "partial_json", input ? input : "{}"));
    free(input);
    event(out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->index++));
}

void anthropic_stream_end(AnthropicStream *st, StrBuf *out, const AnthropicEnd *end, const WireUsage *u) {
    close_block(st, out);
    json_t *delta = json_pack("{s:s, s:o}", "stop_reason", stop_reason(end), "stop_sequence", stop_sequence(end));
    if (end->detail) json_object_set_new(delta, "finish_detail", json_string(end->detail));
    event(out, "message_delta",
          json_pack("{s:s, s:o, s:{s:i}}", "type", "message_delta", "delta", delta, "usage", "output_tokens", u->completion));
    event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

void anthropic_stream_error(StrBuf *out, const ApiError *e) { event(out, "error", error_object(e)); }

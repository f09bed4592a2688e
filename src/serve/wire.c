#include "serve/wire.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static char *dump(json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    if (!s) s = df_strdup("{}"); /* only on allocation failure inside jansson */
    return s;
}

static json_t *error_object(const ApiError *e) {
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type", e->type ? e->type : "server_error",
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

char *wire_error(const ApiError *e) { return dump(error_object(e)); }

char *wire_models(const char *model, int64_t created, int one) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", model, "object", "model", "created", (json_int_t)created, "owned_by",
                          "deltafin");
    return dump(one ? m : json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static json_t *usage_object(const WireUsage *u) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "prompt_tokens", u->prompt, "completion_tokens", u->completion,
                     "total_tokens", u->prompt + u->completion, "prompt_tokens_details", "cached_tokens", u->cached,
                     "completion_tokens_details", "reasoning_tokens", u->reasoning);
}

static json_t *head_object(const WireHead *h, int chunk) {
    const char *object = h->kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", h->id, "object", object, "created", (json_int_t)h->created, "model",
                     h->model, "system_fingerprint", "deltafin-fp32");
}

static json_t *str(const char *s, size_t n) { return json_stringn(s ? s : "", n); }

/* The calls with OpenAI's ids ("call_<response id>_<i>"); with index fields for stream deltas. */
static json_t *calls_with_ids(const WireHead *h, const json_t *calls, int indexed) {
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i);
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", h->id, i);
        json_t *o = json_pack("{s:s, s:s, s:O}", "id", id, "type", "function", "function", json_object_get(c, "function"));
        if (indexed) json_object_set_new(o, "index", json_integer((json_int_t)i));
        json_array_append_new(out, o);
    }
    return out;
}

int wire_chars(const json_t *s) {
    const char *p = json_string_value(s);
    int n = 0;
    for (size_t i = 0; p && i < json_string_length(s); i++) n += ((unsigned char)p[i] & 0xC0) != 0x80;
    return n;
}

/* A completion's logprobs: {tokens, token_logprobs, top_logprobs, text_offset (characters)}. */
static json_t *completion_logprobs(const json_t *entries, int offset) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
    for (size_t i = 0; i < json_array_size(entries); i++) {
        const json_t *e = json_array_get(entries, i), *t = json_object_get(e, "token");
        json_array_append(tokens, (json_t *)t);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *top = json_object();
        const json_t *alt = json_object_get(e, "top_logprobs");
        for (size_t k = 0; k < json_array_size(alt); k++) {
            const json_t *a = json_array_get(alt, k);
            json_object_set(top, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
        }
        json_array_append_new(tops, top);
        json_array_append_new(offsets, json_integer(offset));
        offset += wire_chars(t);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offsets);
}

/* A chat choice's logprobs: {content, refusal[, reasoning_content]}. */
static json_t *chat_logprobs(const WirePart *p) {
    json_t *o = json_pack("{s:O, s:n}", "content", p->lp_content, "refusal");
    if (json_array_size(p->lp_reasoning)) json_object_set(o, "reasoning_content", (json_t *)p->lp_reasoning);
    return o;
}

static json_t *logprobs_of(const WireHead *h, const WirePart *p) {
    if (!p->lp_content) return json_null();
    return h->kind == API_CHAT ? chat_logprobs(p) : completion_logprobs(p->lp_content, p->lp_offset);
}

char *wire_response(const WireHead *h, const WirePart *p, const WireUsage *u) {
    json_t *o = head_object(h, 0), *choice;
    if (h->kind == API_CHAT) {
        json_t *msg = json_pack("{s:s, s:o, s:o}", "role", "assistant", "content",
                                p->tool_calls && !p->content_len ? json_null() : str(p->content, p->content_len),
                                "reasoning_content", str(p->reasoning, p->reasoning_len));
        if (p->tool_calls) json_object_set_new(msg, "tool_calls", calls_with_ids(h, p->tool_calls, 0));
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", logprobs_of(h, p), "finish_reason",
                           p->finish);
    } else
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", str(p->content, p->content_len), "logprobs",
                           logprobs_of(h, p), "finish_reason", p->finish);
    if (p->detail) json_object_set_new(choice, "finish_detail", json_string(p->detail));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_object(u));
    return dump(o);
}

static char *event(json_t *v) {
    char *body = dump(v);
    size_t n = strlen(body);
    char *ev = df_malloc(n + 9);
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, body, n);
    memcpy(ev + 6 + n, "\n\n", 3);
    free(body);
    return ev;
}

char *wire_chunk(const WireHead *h, int role, const WirePart *p, int with_usage) {
    json_t *o = head_object(h, 1), *choice;
    json_t *fr = p->finish ? json_string(p->finish) : json_null();
    if (h->kind == API_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (role || p->content_len) json_object_set_new(delta, "content", str(p->content, p->content_len));
        if (p->reasoning_len) json_object_set_new(delta, "reasoning_content", str(p->reasoning, p->reasoning_len));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", logprobs_of(h, p), "finish_reason", fr);
    } else
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "text", str(p->content, p->content_len), "logprobs",
                           logprobs_of(h, p), "finish_reason", fr);
    if (p->finish && p->detail) json_object_set_new(choice, "finish_detail", json_string(p->detail));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (with_usage) json_object_set_new(o, "usage", json_null());
    return event(o);
}

static char *tool_event(const WireHead *h, json_t *delta_call, int with_usage) {
    json_t *o = head_object(h, 1);
    json_t *choice = json_pack("{s:i, s:{s:[o]}, s:n, s:n}", "index", 0, "delta", "tool_calls", delta_call, "logprobs",
                               "finish_reason");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (with_usage) json_object_set_new(o, "usage", json_null());
    return event(o);
}

char *wire_tool_chunks(const WireHead *h, size_t index, const json_t *call, int with_usage) {
    const json_t *fn = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    char id[96];
    snprintf(id, sizeof id, "call_%s_%zu", h->id, index);
    char *head = tool_event(h, json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index", (json_int_t)index, "id", id, "type",
                                         "function", "function", "name", name ? name : "", "arguments", ""), with_usage);
    char *body = tool_event(h, json_pack("{s:I, s:{s:s}}", "index", (json_int_t)index, "function", "arguments",
                                         args ? args : "{}"), with_usage);
    size_t a = strlen(head), b = strlen(body);
    char *both = df_malloc(a + b + 1);
    memcpy(both, head, a);
    memcpy(both + a, body, b + 1);
    free(head), free(body);
    return both;
}

char *wire_usage_chunk(const WireHead *h, const WireUsage *u) {
    json_t *o = head_object(h, 1);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_object(u));
    return event(o);
}

char *wire_error_event(const ApiError *e) { return event(error_object(e)); }

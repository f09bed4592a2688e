/* request.c - field-by-field validation of the two generation endpoints (see request.h). */
#include "serve/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_TOKENS_LIMIT (1 << 24)

static int verror(ApiError *err, int status, const char *type, const char *code, const char *param, const char *fmt,
                  va_list ap) {
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return -1;
}

int api_error(ApiError *err, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(err, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int api_invalid(ApiError *err, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(err, 400, "invalid_request_error", code, param, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json_t *v) {
    if (!v) return "nothing (the field is missing)";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A field that is absent or null reads as NULL: clients send null for "not set". */
static const json_t *field(const json_t *root, const char *key) {
    const json_t *v = json_object_get(root, key);
    return json_is_null(v) ? NULL : v;
}

static int wrong_type(ApiError *err, const char *key, const char *want, const json_t *v) {
    return api_invalid(err, "invalid_type", key, "Invalid type for '%s': expected %s, but got %s.", key, want,
                       type_name(v));
}

static int get_bool(ApiError *err, const json_t *root, const char *key, int *out) {
    const json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return wrong_type(err, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int get_number(ApiError *err, const json_t *root, const char *key, double lo, double hi, double *out) {
    const json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_number(v)) return wrong_type(err, key, "a number", v);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return api_invalid(err, "invalid_value", key, "Invalid value for '%s': %g is outside %g..%g.", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(ApiError *err, const json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return wrong_type(err, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_invalid(err, "invalid_value", key, "Invalid value for '%s': %lld is outside %lld..%lld.", key,
                           (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int unsupported(ApiError *err, const char *key, const char *what) {
    return api_invalid(err, "unsupported_parameter", key, "Unsupported value for '%s': %s.", key, what);
}

/* stop: a string or an array of up to 4 strings, each 1..256 bytes ("" and [] mean none). */
static int check_stop(ApiRequest *r, ApiError *err) {
    const json_t *v = field(r->root, "stop");
    if (!v || (json_is_string(v) && !json_string_length(v))) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) > 256) return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': longer than 256 bytes.");
        r->stop[r->n_stop++] = v;
        return 0;
    }
    if (!json_is_array(v)) return wrong_type(err, "stop", "a string or an array of strings", v);
    if (json_array_size(v) > 4) return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': at most 4 sequences.");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_string(e)) return wrong_type(err, "stop", "an array of strings", e);
        if (!json_string_length(e) || json_string_length(e) > 256)
            return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': sequence %zu is empty or longer than 256 bytes.", i);
        r->stop[r->n_stop++] = e;
    }
    return 0;
}

/* Fields both endpoints share. */
static int check_common(ApiRequest *r, ApiError *err) {
    const json_t *root = r->root;
    const json_t *model = field(root, "model");
    if (!model) return api_invalid(err, "missing_required_parameter", "model", "Missing required parameter: 'model'.");
    if (!json_is_string(model)) return wrong_type(err, "model", "a string", model);
    if (strcmp(json_string_value(model), SERVE_MODEL_ID) != 0)
        return api_error(err, 404, "invalid_request_error", "model_not_found", "model",
                         "The model '%.80s' does not exist; this server serves '" SERVE_MODEL_ID "'.",
                         json_string_value(model));
    double d = 0;
    int64_t i = 1;
    if (get_bool(err, root, "stream", &r->stream) || get_number(err, root, "temperature", 0, 2, &d) ||
        get_number(err, root, "top_p", 0, 1, &d) || get_int(err, root, "seed", INT64_MIN, INT64_MAX, &i))
        return -1;
    const json_t *v = field(root, "user");
    if (v && !json_is_string(v)) return wrong_type(err, "user", "a string", v);
    i = 1;
    if (get_int(err, root, "n", 1, 128, &i)) return -1;
    if (i != 1) return unsupported(err, "n", "only n=1 is supported (decoding is greedy)");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++) {
        d = 0;
        if (get_number(err, root, penalties[k], -2, 2, &d)) return -1;
        if (d != 0) return unsupported(err, penalties[k], "penalties are not supported (decoding is exact greedy)");
    }
    if ((v = field(root, "logit_bias"))) {
        if (!json_is_object(v)) return wrong_type(err, "logit_bias", "an object", v);
        if (json_object_size(v)) return unsupported(err, "logit_bias", "logit biases are not supported");
    }
    if (check_stop(r, err)) return -1;
    if ((v = field(root, "stream_options"))) {
        if (!json_is_object(v)) return wrong_type(err, "stream_options", "an object", v);
        if (!r->stream)
            return api_invalid(err, "invalid_value", "stream_options",
                               "Invalid value for 'stream_options': only allowed when 'stream' is true.");
        const json_t *u = field(v, "include_usage");
        if (u && !json_is_boolean(u)) return wrong_type(err, "stream_options.include_usage", "a boolean", u);
        r->include_usage = json_is_true(u);
    }
    return 0;
}

static int check_content(ApiError *err, const json_t *content, size_t m) {
    char key[96];
    snprintf(key, sizeof key, "messages[%zu].content", m);
    if (!content || json_is_string(content)) return 0;
    if (!json_is_array(content)) return wrong_type(err, key, "a string or an array of parts", content);
    for (size_t p = 0; p < json_array_size(content); p++) {
        const json_t *part = json_array_get(content, p);
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", m, p);
        if (!json_is_object(part)) return wrong_type(err, key, "an object", part);
        const char *t = json_string_value(json_object_get(part, "type"));
        snprintf(key, sizeof key, "messages[%zu].content[%zu].type", m, p);
        if (!t) return api_invalid(err, "invalid_type", key, "Invalid '%s': expected a string.", key);
        if (strcmp(t, "text") != 0)
            return unsupported(err, key, "only text parts are supported (no images or audio)");
        snprintf(key, sizeof key, "messages[%zu].content[%zu].text", m, p);
        const json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) return wrong_type(err, key, "a string", text);
    }
    return 0;
}

static int check_messages(ApiRequest *r, ApiError *err) {
    const json_t *msgs = field(r->root, "messages");
    if (!msgs) return api_invalid(err, "missing_required_parameter", "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs)) return wrong_type(err, "messages", "an array", msgs);
    if (json_array_size(msgs) == 0)
        return api_invalid(err, "invalid_value", "messages", "Invalid 'messages': empty array; give at least one message.");
    for (size_t m = 0; m < json_array_size(msgs); m++) {
        const json_t *msg = json_array_get(msgs, m);
        char key[96];
        snprintf(key, sizeof key, "messages[%zu]", m);
        if (!json_is_object(msg)) return wrong_type(err, key, "an object", msg);
        snprintf(key, sizeof key, "messages[%zu].role", m);
        const json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return wrong_type(err, key, "a string", role);
        if (check_content(err, field(msg, "content"), m)) return -1;
        snprintf(key, sizeof key, "messages[%zu].tool_calls", m);
        const json_t *tc = field(msg, "tool_calls");
        if (tc && !json_is_array(tc)) return wrong_type(err, key, "an array", tc);
    }
    r->messages = msgs;
    return 0;
}

static int check_chat(ApiRequest *r, ApiError *err) {
    const json_t *root = r->root, *v;
    if (check_messages(r, err)) return -1;
    int64_t a = -1, b = -1;
    if (get_int(err, root, "max_tokens", 1, MAX_TOKENS_LIMIT, &a) ||
        get_int(err, root, "max_completion_tokens", 1, MAX_TOKENS_LIMIT, &b))
        return -1;
    r->max_tokens = a < 0 ? b : b < 0 ? a : a < b ? a : b;
    int lp = 0;
    if (get_bool(err, root, "logprobs", &lp)) return -1;
    if (lp) return unsupported(err, "logprobs", "log probabilities are not supported");
    if (field(root, "top_logprobs")) return unsupported(err, "top_logprobs", "log probabilities are not supported");
    if ((v = field(root, "tools"))) {
        if (!json_is_array(v)) return wrong_type(err, "tools", "an array", v);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_object(json_array_get(v, i))) return wrong_type(err, "tools", "an array of objects", json_array_get(v, i));
        if (json_array_size(v)) r->tools = v;
    }
    /* K3's texts for forcing or forbidding calls are not known: only the model's own choice */
    if ((v = field(root, "tool_choice")) &&
        !(json_is_string(v) && (!strcmp(json_string_value(v), "auto") || (!r->tools && !strcmp(json_string_value(v), "none")))))
        return unsupported(err, "tool_choice", "only \"auto\" (the model decides)");
    if (field(root, "functions")) return unsupported(err, "functions", "use 'tools' instead of the legacy 'functions'");
    if (field(root, "function_call")) return unsupported(err, "function_call", "use 'tools' instead of 'function_call'");
    if (field(root, "audio")) return unsupported(err, "audio", "audio output is not supported");
    if ((v = field(root, "response_format"))) {
        if (!json_is_object(v)) return wrong_type(err, "response_format", "an object", v);
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!t || strcmp(t, "text") != 0) return unsupported(err, "response_format", "only {\"type\": \"text\"}");
    }
    if ((v = field(root, "reasoning_effort"))) {
        if (!json_is_string(v)) return wrong_type(err, "reasoning_effort", "a string", v);
        const char *e = json_string_value(v);
        if (strcmp(e, "low") && strcmp(e, "high") && strcmp(e, "max"))
            return api_invalid(err, "invalid_value", "reasoning_effort",
                               "Invalid value for 'reasoning_effort': '%.40s'; K3 supports low, high and max.", e);
        r->effort = e;
    }
    return 0;
}

/* prompt: a string, an array of token ids, or a one-element array of either. */
static int check_prompt(ApiRequest *r, ApiError *err) {
    const json_t *p = field(r->root, "prompt");
    if (!p) return api_invalid(err, "missing_required_parameter", "prompt", "Missing required parameter: 'prompt'.");
    if (json_is_array(p) && json_array_size(p) >= 1 && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) > 1) return unsupported(err, "prompt", "one prompt per request (batches are not supported)");
        p = json_array_get(p, 0);
    }
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        r->prompt_len = json_string_length(p);
        if (!r->prompt_len) return api_invalid(err, "invalid_value", "prompt", "Invalid 'prompt': empty string.");
        return 0;
    }
    if (!json_is_array(p)) return wrong_type(err, "prompt", "a string or an array of token ids", p);
    if (!json_array_size(p)) return api_invalid(err, "invalid_value", "prompt", "Invalid 'prompt': empty array.");
    for (size_t i = 0; i < json_array_size(p); i++) {
        const json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return api_invalid(err, "invalid_type", "prompt", "Invalid 'prompt': element %zu is not a token id.", i);
    }
    r->prompt_ids = p;
    return 0;
}

static int check_completion(ApiRequest *r, ApiError *err) {
    const json_t *root = r->root, *v;
    if (check_prompt(r, err)) return -1;
    if (get_int(err, root, "max_tokens", 0, MAX_TOKENS_LIMIT, &r->max_tokens)) return -1;
    int echo = 0;
    if (get_bool(err, root, "echo", &echo)) return -1;
    if (echo) return unsupported(err, "echo", "echoing the prompt is not supported");
    if ((v = field(root, "suffix"))) {
        if (!json_is_string(v)) return wrong_type(err, "suffix", "a string", v);
        if (json_string_length(v)) return unsupported(err, "suffix", "suffixes are not supported");
    }
    int64_t best = 1;
    if (get_int(err, root, "best_of", 1, 128, &best)) return -1;
    if (best != 1) return unsupported(err, "best_of", "only best_of=1 is supported");
    if (field(root, "logprobs")) return unsupported(err, "logprobs", "log probabilities are not supported");
    return 0;
}

int api_request_parse(ApiKind kind, const char *body, size_t len, ApiRequest *r, ApiError *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    json_error_t je;
    r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!r->root)
        return api_invalid(err, "invalid_json", NULL, "We could not parse the JSON body of your request: %s (line %d, column %d).",
                           je.text, je.line, je.column);
    int rc = -1;
    if (!json_is_object(r->root))
        api_invalid(err, "invalid_type", NULL, "The request body must be a JSON object, not %s.", type_name(r->root));
    else if (!check_common(r, err))
        rc = kind == API_CHAT ? check_chat(r, err) : check_completion(r, err);
    if (rc) api_request_free(r);
    return rc;
}

void api_request_free(ApiRequest *r) {
    json_decref(r->root);
    r->root = NULL;
}

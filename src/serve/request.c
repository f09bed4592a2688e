/* request.c - field-by-field validation of the two generation endpoints (see request.h). */
#include "serve/request.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

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
const json_t *api_field(const json_t *root, const char *key) {
    const json_t *v = json_object_get(root, key);
    return json_is_null(v) ? NULL : v;
}

int api_wrong_type(ApiError *err, const char *key, const char *want, const json_t *v) {
    return api_invalid(err, "invalid_type", key, "Invalid type for '%s': expected %s, but got %s.", key, want,
                       type_name(v));
}

int api_get_bool(ApiError *err, const json_t *root, const char *key, int *out) {
    const json_t *v = api_field(root, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return api_wrong_type(err, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

int api_get_number(ApiError *err, const json_t *root, const char *key, double lo, double hi, double *out) {
    const json_t *v = api_field(root, key);
    if (!v) return 0;
    if (!json_is_number(v)) return api_wrong_type(err, key, "a number", v);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return api_invalid(err, "invalid_value", key, "Invalid value for '%s': %g is outside %g..%g.", key, x, lo, hi);
    *out = x;
    return 0;
}

int api_get_int(ApiError *err, const json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const json_t *v = api_field(root, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return api_wrong_type(err, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_invalid(err, "invalid_value", key, "Invalid value for '%s': %lld is outside %lld..%lld.", key,
                           (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

int api_unsupported(ApiError *err, const char *key, const char *what) {
    return api_invalid(err, "unsupported_parameter", key, "Unsupported value for '%s': %s.", key, what);
}

/* stop: a string or an array of up to 4 strings, each 1..256 bytes ("" and [] mean none). */
static int check_stop(ApiRequest *r, ApiError *err) {
    const json_t *v = api_field(r->root, "stop");
    if (!v || (json_is_string(v) && !json_string_length(v))) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) > 256) return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': longer than 256 bytes.");
        r->stop[r->n_stop++] = v;
        return 0;
    }
    if (!json_is_array(v)) return api_wrong_type(err, "stop", "a string or an array of strings", v);
    if (json_array_size(v) > 4) return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': at most 4 sequences.");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_string(e)) return api_wrong_type(err, "stop", "an array of strings", e);
        if (!json_string_length(e) || json_string_length(e) > 256)
            return api_invalid(err, "invalid_value", "stop", "Invalid 'stop': sequence %zu is empty or longer than 256 bytes.", i);
        r->stop[r->n_stop++] = e;
    }
    return 0;
}

/* logit_bias: {"<token id>": -100..100, ...}; the ids are checked against the vocabulary when
 * the sampler is made. */
static int check_logit_bias(ApiRequest *r, ApiError *err) {
    const json_t *v = api_field(r->root, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v)) return api_wrong_type(err, "logit_bias", "an object", v);
    if (json_object_size(v) > SAMPLE_MAX_BIAS)
        return api_invalid(err, "invalid_value", "logit_bias", "Invalid 'logit_bias': more than %d entries.", SAMPLE_MAX_BIAS);
    const char *key;
    const json_t *b;
    json_object_foreach((json_t *)v, key, b) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id > INT32_MAX)
            return api_invalid(err, "invalid_value", "logit_bias", "Invalid 'logit_bias': key '%.40s' is not a token id.", key);
        if (!json_is_number(b) || !(fabs(json_number_value(b)) <= 100))
            return api_invalid(err, "invalid_value", "logit_bias", "Invalid 'logit_bias': the bias of token %ld must be a number in -100..100.", id);
        r->bias[r->sample.n_bias++] = (LogitBias){(int)id, (float)json_number_value(b)};
    }
    r->sample.bias = r->bias;
    return 0;
}

void api_sampling_defaults(ApiRequest *r, int temperature_given) {
    SampleParams *p = &r->sample;
    if (p->top_p == 0) p->top_p = 1, p->top_k = 1; /* the smallest nucleus: the most probable token */
    if (p->top_k < 0) p->top_k = 0;
    int truncates = p->top_p < 1 || p->top_k > 0 || p->min_p > 0;
    if (!temperature_given && truncates) p->temperature = 1; /* OpenAI's default temperature */
}

/* The sampler's own rule for the values (engine/sampler.h: one rule for the server and the
 * CLI), as a 400 naming the field. */
int api_check_sampling(const ApiRequest *r, ApiError *err) {
    const char *field;
    if (!sampler_check(&r->sample, &field)) return 0;
    return api_invalid(err, "invalid_value", field, "Invalid value for '%s': %s.", field, df_errmsg());
}

/* temperature, top_p, top_k, min_p, seed, penalties, logit_bias: their types here, their
 * ranges by the sampler's rule (top_p 0 and top_k -1 are accepted first, as OpenAI's clients
 * and llama.cpp's send them). */
int api_check_sampling_fields(ApiRequest *r, ApiError *err) {
    const json_t *root = r->root;
    SampleParams *p = &r->sample;
    int64_t top_k = 0, seed = 0;
    if (api_get_number(err, root, "temperature", -INFINITY, INFINITY, &p->temperature) ||
        api_get_number(err, root, "top_p", 0, 1, &p->top_p) || api_get_int(err, root, "top_k", -1, 1 << 20, &top_k) ||
        api_get_number(err, root, "min_p", -INFINITY, INFINITY, &p->min_p) ||
        api_get_int(err, root, "seed", INT64_MIN, INT64_MAX, &seed) ||
        api_get_number(err, root, "presence_penalty", -INFINITY, INFINITY, &p->presence_penalty) ||
        api_get_number(err, root, "frequency_penalty", -INFINITY, INFINITY, &p->frequency_penalty) || check_logit_bias(r, err))
        return -1;
    p->top_k = (int)top_k;
    p->seed = (uint64_t)seed;
    r->seeded = api_field(root, "seed") != NULL;
    api_sampling_defaults(r, api_field(root, "temperature") != NULL);
    return api_check_sampling(r, err);
}

int api_check_bookkeeping(ApiRequest *r, ApiError *err) {
    const json_t *v = api_field(r->root, "user");
    if (v && !json_is_string(v)) return api_wrong_type(err, "user", "a string", v);
    int store = 0;
    r->parallel_tool_calls = 1;
    if (api_get_bool(err, r->root, "store", &store) || api_get_bool(err, r->root, "parallel_tool_calls", &r->parallel_tool_calls))
        return -1;
    if (!(v = api_field(r->root, "metadata"))) return 0;
    if (!json_is_object(v)) return api_wrong_type(err, "metadata", "an object", v);
    if (json_object_size(v) > 16) return api_invalid(err, "invalid_value", "metadata", "Invalid 'metadata': at most 16 keys.");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        if (strlen(key) > 64 || !json_is_string(val) || json_string_length(val) > 512)
            return api_invalid(err, "invalid_value", "metadata",
                               "Invalid 'metadata': keys up to 64 characters, values strings up to 512 characters.");
    }
    return 0;
}

int api_check_model(const json_t *root, const char *model_id, int anthropic, ApiError *err) {
    const json_t *model = api_field(root, "model");
    if (!model) return api_invalid(err, "missing_required_parameter", "model", "Missing required parameter: 'model'.");
    if (!json_is_string(model)) return api_wrong_type(err, "model", "a string", model);
    if (strcmp(json_string_value(model), model_id) != 0)
        return api_error(err, 404, anthropic ? "not_found_error" : "invalid_request_error", "model_not_found", "model",
                         "The model '%.80s' does not exist; this server serves '%.128s'.", json_string_value(model), model_id);
    return 0;
}

/* Fields both endpoints share. */
static int check_common(ApiRequest *r, const char *model_id, ApiError *err) {
    const json_t *root = r->root;
    if (api_check_model(root, model_id, 0, err)) return -1;
    if (api_get_bool(err, root, "stream", &r->stream) || api_check_sampling_fields(r, err) || api_check_bookkeeping(r, err)) return -1;
    int64_t i = 1;
    if (api_get_int(err, root, "n", 1, 128, &i)) return -1;
    if (i != 1) return api_unsupported(err, "n", "only n=1 is supported (one answer per request)");
    if (check_stop(r, err)) return -1;
    const json_t *v = api_field(root, "stream_options");
    if (v) { /* (only read when streaming) */
        if (!json_is_object(v)) return api_wrong_type(err, "stream_options", "an object", v);
        const json_t *u = api_field(v, "include_usage");
        if (u && !json_is_boolean(u)) return api_wrong_type(err, "stream_options.include_usage", "a boolean", u);
        r->include_usage = r->stream && json_is_true(u);
    }
    return 0;
}

static int check_content(ApiError *err, const json_t *content, size_t m) {
    char key[96];
    snprintf(key, sizeof key, "messages[%zu].content", m);
    if (!content || json_is_string(content)) return 0;
    if (!json_is_array(content)) return api_wrong_type(err, key, "a string or an array of parts", content);
    for (size_t p = 0; p < json_array_size(content); p++) {
        const json_t *part = json_array_get(content, p);
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", m, p);
        if (!json_is_object(part)) return api_wrong_type(err, key, "an object", part);
        const char *t = json_string_value(json_object_get(part, "type"));
        snprintf(key, sizeof key, "messages[%zu].content[%zu].type", m, p);
        if (!t) return api_invalid(err, "invalid_type", key, "Invalid '%s': expected a string.", key);
        if (strcmp(t, "text") != 0)
            return api_unsupported(err, key, "only text parts are supported (no images or audio)");
        snprintf(key, sizeof key, "messages[%zu].content[%zu].text", m, p);
        const json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) return api_wrong_type(err, key, "a string", text);
    }
    return 0;
}

static int check_messages(ApiRequest *r, ApiError *err) {
    const json_t *msgs = api_field(r->root, "messages");
    if (!msgs) return api_invalid(err, "missing_required_parameter", "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs)) return api_wrong_type(err, "messages", "an array", msgs);
    if (json_array_size(msgs) == 0)
        return api_invalid(err, "invalid_value", "messages", "Invalid 'messages': empty array; give at least one message.");
    for (size_t m = 0; m < json_array_size(msgs); m++) {
        const json_t *msg = json_array_get(msgs, m);
        char key[96];
        snprintf(key, sizeof key, "messages[%zu]", m);
        if (!json_is_object(msg)) return api_wrong_type(err, key, "an object", msg);
        snprintf(key, sizeof key, "messages[%zu].role", m);
        const json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return api_wrong_type(err, key, "a string", role);
        if (!strcmp(json_string_value(role), "developer")) /* OpenAI's newer name for system */
            json_object_set_new((json_t *)msg, "role", json_string("system"));
        if (check_content(err, api_field(msg, "content"), m)) return -1;
        snprintf(key, sizeof key, "messages[%zu].tool_calls", m);
        const json_t *tc = api_field(msg, "tool_calls");
        if (tc && !json_is_array(tc)) return api_wrong_type(err, key, "an array", tc);
    }
    r->messages = msgs;
    return 0;
}

/* Fields other servers implement for chats and this one does not: refused by name unless they
 * ask for nothing (their neutral value), never accepted and ignored. */
static int check_unimplemented(const json_t *root, ApiError *err) {
    static const struct {
        const char *key, *what;
        double neutral; /* NAN: no neutral value, refused whenever present */
    } fields[] = {
        {"repetition_penalty", "not implemented here (use frequency_penalty or presence_penalty)", 1},
        {"top_a", "top-a sampling is not implemented (use top_p, top_k or min_p)", 0},
        {"web_search_options", "web search is not available", NAN},
        {"prediction", "predicted outputs are not implemented", NAN},
        {"best_of", "only best_of=1 is supported (one answer per request)", 1},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const json_t *v = api_field(root, fields[i].key);
        if (v && !(json_is_number(v) && json_number_value(v) == fields[i].neutral)) return api_unsupported(err, fields[i].key, fields[i].what);
    }
    const json_t *v = api_field(root, "echo");
    if (v && !json_is_false(v)) return api_unsupported(err, "echo", "echoing the prompt is not supported");
    v = api_field(root, "suffix");
    if (v && !(json_is_string(v) && !json_string_length(v))) return api_unsupported(err, "suffix", "suffixes are not supported");
    return 0;
}

static int check_chat(ApiRequest *r, ApiError *err) {
    const json_t *root = r->root, *v;
    if (check_messages(r, err)) return -1;
    int64_t a = -1, b = -1;
    if (api_get_int(err, root, "max_tokens", 1, MAX_TOKENS_LIMIT, &a) ||
        api_get_int(err, root, "max_completion_tokens", 1, MAX_TOKENS_LIMIT, &b))
        return -1;
    r->max_tokens = a < 0 ? b : b < 0 ? a : a < b ? a : b;
    int64_t top = 0;
    if (api_get_bool(err, root, "logprobs", &r->sample.logprobs) || api_get_int(err, root, "top_logprobs", 0, SAMPLE_MAX_TOP_LOGPROBS, &top))
        return -1;
    if (top && !r->sample.logprobs)
        return api_invalid(err, "invalid_value", "top_logprobs", "Invalid 'top_logprobs': it needs 'logprobs' set to true.");
    r->sample.top_logprobs = (int)top;
    if ((v = api_field(root, "tools"))) {
        if (!json_is_array(v)) return api_wrong_type(err, "tools", "an array", v);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_object(json_array_get(v, i))) return api_wrong_type(err, "tools", "an array of objects", json_array_get(v, i));
        if (json_array_size(v)) r->tools = v;
    }
    /* tool_choice and response_format are honoured by constrained decoding (text/reply_grammar.h
     * checks them in full when the prompt is rendered); here only their shape */
    if ((v = api_field(root, "tool_choice"))) {
        if (!json_is_string(v) && !json_is_object(v)) return api_wrong_type(err, "tool_choice", "a string or an object", v);
        r->tool_choice = v;
    }
    if (check_unimplemented(root, err)) return -1;
    if (api_field(root, "functions")) return api_unsupported(err, "functions", "use 'tools' instead of the legacy 'functions'");
    if (api_field(root, "function_call")) return api_unsupported(err, "function_call", "use 'tools' instead of 'function_call'");
    if (api_field(root, "audio")) return api_unsupported(err, "audio", "audio output is not supported");
    if ((v = api_field(root, "modalities"))) {
        if (!json_is_array(v)) return api_wrong_type(err, "modalities", "an array", v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *m = json_string_value(json_array_get(v, i));
            if (!m || strcmp(m, "text")) return api_unsupported(err, "modalities", "only [\"text\"]");
        }
    }
    if ((v = api_field(root, "response_format"))) {
        if (!json_is_object(v)) return api_wrong_type(err, "response_format", "an object", v);
        r->response_format = v;
    }
    if ((v = api_field(root, "reasoning_effort"))) {
        if (!json_is_string(v)) return api_wrong_type(err, "reasoning_effort", "a string", v);
        if (!(r->effort = k3_effort(json_string_value(v))))
            return api_invalid(err, "invalid_value", "reasoning_effort",
                               "Invalid value for 'reasoning_effort': '%.40s'; use minimal, low, medium, high or max.",
                               json_string_value(v));
    }
    return 0;
}

const char *k3_effort(const char *openai) {
    static const char *const map[][2] = {{"minimal", "low"}, {"low", "low"}, {"medium", "high"}, {"high", "max"}, {"max", "max"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(openai, map[i][0])) return map[i][1];
    return NULL;
}

/* prompt: a string, an array of token ids, or a one-element array of either. */
static int check_prompt(ApiRequest *r, ApiError *err) {
    const json_t *p = api_field(r->root, "prompt");
    if (!p) return api_invalid(err, "missing_required_parameter", "prompt", "Missing required parameter: 'prompt'.");
    if (json_is_array(p) && json_array_size(p) >= 1 && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) > 1) return api_unsupported(err, "prompt", "one prompt per request (batches are not supported)");
        p = json_array_get(p, 0);
    }
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        r->prompt_len = json_string_length(p);
        if (!r->prompt_len) return api_invalid(err, "invalid_value", "prompt", "Invalid 'prompt': empty string.");
        return 0;
    }
    if (!json_is_array(p)) return api_wrong_type(err, "prompt", "a string or an array of token ids", p);
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
    const json_t *root = r->root;
    if (check_prompt(r, err)) return -1;
    if (api_get_int(err, root, "max_tokens", 0, MAX_TOKENS_LIMIT, &r->max_tokens) || check_unimplemented(root, err)) return -1;
    int64_t lp = -1;
    if (api_get_int(err, root, "logprobs", 0, 5, &lp)) return -1;
    if (lp >= 0) r->sample.logprobs = 1, r->sample.top_logprobs = (int)lp;
    return 0;
}

/* jansson's messages name its own flags for a NUL: say it in the client's terms. */
json_t *api_parse_json(const char *body, size_t len, ApiError *err) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (root) return root;
    enum json_error_code code = json_error_code(&je);
    if (code == json_error_null_character || code == json_error_null_byte_in_key)
        api_invalid(err, "invalid_json", NULL,
                    "We could not parse the JSON body of your request: strings may not contain NUL characters (\\u0000) "
                    "(line %d, column %d).", je.line, je.column);
    else
        api_invalid(err, "invalid_json", NULL, "We could not parse the JSON body of your request: %s (line %d, column %d).",
                    je.text, je.line, je.column);
    return NULL;
}

int api_request_parse(ApiKind kind, const char *body, size_t len, const char *model_id, ApiRequest *r, ApiError *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->sample = (SampleParams)SAMPLE_PARAMS_GREEDY;
    if (!(r->root = api_parse_json(body, len, err))) return -1;
    int rc = -1;
    if (!json_is_object(r->root))
        api_invalid(err, "invalid_type", NULL, "The request body must be a JSON object, not %s.", type_name(r->root));
    else if (!check_common(r, model_id, err))
        rc = kind == API_CHAT ? check_chat(r, err) : check_completion(r, err);
    if (rc) api_request_free(r);
    return rc;
}

int api_translated_begin(ApiRequest *r, const char *body, size_t len, ApiError *err) {
    memset(r, 0, sizeof *r);
    r->kind = API_CHAT;
    r->max_tokens = -1;
    r->sample = (SampleParams)SAMPLE_PARAMS_GREEDY;
    r->parallel_tool_calls = 1;
    if (!(r->root = api_parse_json(body, len, err))) return -1;
    r->owned = json_pack("{s:[], s:[]}", "messages", "tools");
    if (json_is_object(r->root)) return 0;
    api_wrong_type(err, "body", "a JSON object", r->root);
    api_request_free(r);
    return -1;
}

void api_request_free(ApiRequest *r) {
    json_decref(r->root);
    json_decref(r->owned);
    json_decref(r->echo);
    r->root = r->owned = r->echo = NULL;
}

/* request.h - validating the body of POST /v1/chat/completions and /v1/completions (OpenAI),
 * and the request both those and /v1/messages (anthropic.h) become.
 *
 * Every field the server reads is checked for type and range; what cannot be honoured (n > 1,
 * images, audio, echo, suffix, best_of, repetition_penalty, top_a, web_search_options,
 * prediction...) is refused with a 400 naming the field, never accepted and ignored (a field at
 * its neutral value, echo false or repetition_penalty 1, asks for nothing and is accepted). response_format (text, json_object, json_schema) and tool_choice (none, auto,
 * required, a named function) with parallel_tool_calls are honoured by constrained decoding
 * (text/reply_grammar.h, which checks them in full when the exchange starts). Sampling (temperature, top_p, top_k, min_p, seed,
 * penalties, logit_bias, logprobs) is honoured by the sampler (engine/sampler.h); without a
 * temperature decoding is greedy, exact, unless top_p, top_k or min_p ask for sampling (then at
 * OpenAI's default temperature 1). `developer` messages are system messages; reasoning_effort
 * low / medium / high map onto K3's low / high / max (minimal is low, max is accepted as is).
 * `user`, `metadata`, `store` and `stream_options` are checked and accepted;
 * unknown fields are ignored. `stop` sequences are honoured (on the answer; a chat's reasoning is
 * not cut). A refusal is an ApiError naming the field, in OpenAI's terms. The ApiRequest owns the
 * parsed JSON; the pointers into it stay valid until api_request_free. */
#ifndef DF_REQUEST_H
#define DF_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"

typedef enum { API_CHAT, API_COMPLETION } ApiKind;

typedef struct {
    int status;       /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL or a short code */
    char param[64];   /* the field at fault, "" for none */
    char message[320];
} ApiError;

typedef struct {
    ApiKind kind;
    int anthropic;            /* came from /v1/messages: answer in Anthropic's shapes */
    int responses;            /* came from /v1/responses: answer as OpenAI's Responses API */
    json_t *echo;             /* owned: what a Responses answer repeats of the request, or NULL */
    json_t *root;             /* owned */
    json_t *owned;            /* owned: what a translated request built (messages, tools) */
    const json_t *messages;   /* chat: OpenAI-shaped messages */
    const json_t *tools;      /* chat: OpenAI tools array, or NULL */
    const json_t *tool_choice;     /* chat: OpenAI's value, or NULL */
    const json_t *response_format; /* chat: OpenAI's object, or NULL */
    int parallel_tool_calls;  /* chat: 0 only when the request says false */
    const char *effort;       /* chat: K3's low | high | max, NULL = default */
    const char *prompt;       /* completion: text, or NULL when given as token ids */
    size_t prompt_len;
    const json_t *prompt_ids; /* completion: array of token ids, or NULL */
    int64_t max_tokens;       /* -1 when not given */
    const json_t *stop[4];    /* stop sequences (non-empty strings) */
    int n_stop;
    int stream, include_usage;
    SampleParams sample;      /* sample.bias points into bias[] (re-point after copying) */
    LogitBias bias[SAMPLE_MAX_BIAS];
    int seeded;               /* a seed was given (else the caller picks one) */
} ApiRequest;

/* Parses and validates body[0..len); model_id: the served model's name, the one `model` may
 * name. Returns 0, or -1 with *err filled. */
int api_request_parse(ApiKind kind, const char *body, size_t len, const char *model_id, ApiRequest *r, ApiError *err);
/* root's `model` names model_id, else a 400 (missing, not a string) or 404 (another model;
 * anthropic: Anthropic's error type). */
int api_check_model(const json_t *root, const char *model_id, int anthropic, ApiError *err);
/* r->sample by the sampler's rule (sampler_check), as a 400 naming the field. */
int api_check_sampling(const ApiRequest *r, ApiError *err);
/* OpenAI's sampling fields of r->root (temperature, top_p, top_k, min_p, seed, penalties,
 * logit_bias) into r->sample, checked. */
int api_check_sampling_fields(ApiRequest *r, ApiError *err);
/* user: a string; store and parallel_tool_calls: booleans (r->parallel_tool_calls); metadata:
 * up to 16 string values (keys <= 64, values <= 512 bytes). For the client's bookkeeping: they
 * change nothing here. */
int api_check_bookkeeping(ApiRequest *r, ApiError *err);
void api_request_free(ApiRequest *r);
/* The start of a request another API's body is translated into (anthropic.h, responses.h): a
 * greedy chat, parallel tool calls allowed, no budget, body parsed into r->root (an object), and
 * r->owned = {"messages": [], "tools": []} for the translation. Returns 0, or -1 with *err
 * filled (r then holds nothing). */
int api_translated_begin(ApiRequest *r, const char *body, size_t len, ApiError *err);

/* Parses a JSON body; on failure fills *err (400 invalid_json; the message says where and what,
 * in words a client understands). NULL then. */
json_t *api_parse_json(const char *body, size_t len, ApiError *err);

/* After the sampling fields are read: top_p 0 is the most probable token; without a
 * temperature, truncation (top_p < 1, top_k, min_p) samples at temperature 1, else decoding is
 * greedy. */
void api_sampling_defaults(ApiRequest *r, int temperature_given);
/* K3's effort level for an OpenAI reasoning_effort (minimal, low, medium, high, max), or NULL. */
const char *k3_effort(const char *openai);

/* For the request parsers: a field that is absent or null reads as NULL (clients send null for
 * "not set"); the getters leave *out alone when the field is absent and fail with a 400 naming
 * key on a wrong type or a value outside lo..hi. */
const json_t *api_field(const json_t *obj, const char *key);
int api_wrong_type(ApiError *err, const char *key, const char *want, const json_t *v);
int api_get_bool(ApiError *err, const json_t *obj, const char *key, int *out);
int api_get_number(ApiError *err, const json_t *obj, const char *key, double lo, double hi, double *out);
int api_get_int(ApiError *err, const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out);
/* A 400 "unsupported_parameter" about key. */
int api_unsupported(ApiError *err, const char *key, const char *what);

/* Fills err and returns -1. */
int api_error(ApiError *err, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A 400 invalid_request_error about param. */
int api_invalid(ApiError *err, const char *code, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif

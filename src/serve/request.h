/* request.h - validating the body of POST /v1/chat/completions and /v1/completions.
 *
 * Every field the server reads is checked for type and range; fields that would change the
 * answer but cannot be honoured (n > 1, logprobs, images, penalties, echo, suffix, forced
 * tool choice...)
 * are refused; sampling knobs (temperature, top_p, seed) are range-checked and ignored, since
 * decoding is greedy; unknown fields are ignored. `stop` sequences are honoured (on the answer;
 * a chat's reasoning is not cut). A refusal is an ApiError naming the field, in OpenAI's terms. The ApiRequest owns the parsed JSON; the pointers into
 * it stay valid until api_request_free. */
#ifndef DF_REQUEST_H
#define DF_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MODEL_ID "deltafin-kimi-k3"

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
    json_t *root;             /* owned */
    const json_t *messages;   /* chat */
    const json_t *tools;      /* chat: OpenAI tools array, or NULL */
    const char *effort;       /* chat: NULL = default */
    const char *prompt;       /* completion: text, or NULL when given as token ids */
    size_t prompt_len;
    const json_t *prompt_ids; /* completion: array of token ids, or NULL */
    int64_t max_tokens;       /* -1 when not given */
    const json_t *stop[4];    /* stop sequences (non-empty strings) */
    int n_stop;
    int stream, include_usage;
} ApiRequest;

/* Parses and validates body[0..len). Returns 0, or -1 with *err filled. */
int api_request_parse(ApiKind kind, const char *body, size_t len, ApiRequest *r, ApiError *err);
void api_request_free(ApiRequest *r);

/* Fills err and returns -1. */
int api_error(ApiError *err, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A 400 invalid_request_error about param. */
int api_invalid(ApiError *err, const char *code, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif

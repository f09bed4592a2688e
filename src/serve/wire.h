/* wire.h - the JSON shapes OpenAI clients expect: errors, whole responses, stream chunks and
 * the server-sent-event framing. Every function returns a new string the caller frees. */
#ifndef DF_WIRE_H
#define DF_WIRE_H

#include <stddef.h>
#include <jansson.h>
#include <stdint.h>

#include "serve/request.h"

typedef struct {
    ApiKind kind;
    const char *id;   /* "chatcmpl-..." / "cmpl-..." */
    int64_t created;  /* unix seconds */
    const char *model; /* the served model's name */
} WireHead;

typedef struct {
    int prompt, completion, cached;
    int reasoning;    /* of the completion, tokens spent thinking */
} WireUsage;

/* {"error": {"message", "type", "param", "code"}} */
char *wire_error(const ApiError *e);
/* GET /v1/models: the one model; one: the model object alone (GET /v1/models/{id}). */
char *wire_models(const char *model, int64_t created, int one);
/* What a response or a stream chunk carries. */
typedef struct {
    const char *reasoning, *content;
    size_t reasoning_len, content_len;
    const char *finish;             /* "stop" | "length" | "tool_calls"; NULL in a chunk before the last */
    const json_t *tool_calls;       /* parsed calls (ids are added here), or NULL */
    const json_t *lp_content;       /* log-probability entries (exchange.h), or NULL when not asked for */
    const json_t *lp_reasoning;     /* chat: those of the thinking tokens (an extension), or NULL */
    int lp_offset;                  /* completion: text offset of the first entry */
    const char *detail;             /* why a "length" finish came early (exchange.h), or NULL */
} WirePart;

/* Characters (code points) of a JSON string: the unit of a completion's text_offset. */
int wire_chars(const json_t *s);

/* A whole (non-streamed) response. With tool calls, empty content is null. The usage carries
 * completion_tokens_details.reasoning_tokens; a finish with a detail says it in the choice's
 * "finish_detail" (an extension: "repetition", "thinking"). */
char *wire_response(const WireHead *h, const WirePart *p, const WireUsage *u);
/* One "data: {...}\n\n" event. role: first chat chunk; with_usage: include "usage": null
 * (include_usage streams carry it on every chunk). */
char *wire_chunk(const WireHead *h, int role, const WirePart *p, int with_usage);
/* The two events of one tool call as OpenAI streams them: the call's index, id, type and name
 * with empty arguments, then its arguments. call: {"type", "function": {"name", "arguments"}}. */
char *wire_tool_chunks(const WireHead *h, size_t index, const json_t *call, int with_usage);
/* The include_usage event: empty choices and the usage. */
char *wire_usage_chunk(const WireHead *h, const WireUsage *u);
/* An error inside a stream (after the 200 was sent). */
char *wire_error_event(const ApiError *e);

#define WIRE_DONE "data: [DONE]\n\n"

#endif

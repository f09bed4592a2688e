/* responses.h - OpenAI's Responses API (POST /v1/responses) on top of the same generation as the
 * chat endpoint: what the OpenAI Agents SDK and Codex-style agents speak.
 *
 * Requests: model, input (a string, or items: messages with input_text / output_text parts,
 * function_call and function_call_output items of earlier turns, reasoning items), instructions
 * (a system message first), tools (function tools: name, description, parameters, strict),
 * tool_choice (auto, none, required, {"type": "function", "name"}), parallel_tool_calls,
 * text.format (text, json_object, json_schema: constrained decoding as for the chat endpoint's
 * response_format), reasoning.effort (minimal, low, medium, high as the chat endpoint's
 * reasoning_effort), max_output_tokens, temperature, top_p, stream, store, metadata, user,
 * truncation "disabled", include (nothing to include: the reasoning comes as plain text). They
 * become the OpenAI-shaped chat request (request.h) the renderer takes; what cannot be honoured
 * (previous_response_id and conversation: this server keeps no responses; background; images
 * and files; hosted tools; prompt templates; top_logprobs; max_tool_calls) is refused naming
 * the field. Without a temperature decoding is greedy, exact.
 *
 * Answers: a response object with status completed, or incomplete (incomplete_details.reason
 * max_output_tokens) when the budget ran out, and output items: the thinking as a reasoning
 * item (its text in content, reasoning_text), the answer as a message (output_text), each call
 * as a function_call item; usage with input, cached, output and reasoning tokens. Streamed as
 * typed events with sequence numbers: response.created and .in_progress, per item
 * response.output_item.added, its parts (content_part / reasoning_text / output_text /
 * function_call_arguments deltas and dones) and response.output_item.done, then
 * response.completed (or response.incomplete) with the whole response; an error after the
 * stream began is an `error` event. Every function that returns a string returns a new one the
 * caller frees. */
#ifndef DF_RESPONSES_H
#define DF_RESPONSES_H

#include <jansson.h>
#include <stddef.h>

#include "serve/request.h"
#include "serve/wire.h"
#include "text/strbuf.h"

/* Parses and validates a /v1/responses body into r (r->responses set, r->echo holding what the
 * answer repeats). Returns 0, or -1 with *err filled. */
int responses_request_parse(const char *body, size_t len, const char *model_id, ApiRequest *r, ApiError *err);

/* What an answer holds. */
typedef struct {
    const char *reasoning, *content;
    size_t reasoning_len, content_len;
    const json_t *tool_calls;   /* OpenAI-style calls (borrowed) or NULL */
    const char *finish;         /* the exchange's: "stop" | "length" | "tool_calls" */
    const json_t *echo;         /* the request's fields the response repeats (ApiRequest.echo) */
} ResponsesAnswer;

/* The whole response object. */
char *responses_object(const WireHead *h, const ResponsesAnswer *a, const WireUsage *u);

/* A streamed response: its items so far. */
typedef struct {
    int seq;         /* the next event's sequence_number */
    int items;       /* output items opened so far (the next one's output_index) */
    int open;        /* the item open now: 0 none, 1 reasoning, 2 message */
    int said;        /* a message item was opened */
    StrBuf text;     /* the open item's text so far (its done events repeat it) */
} ResponsesStream;

/* response.created and response.in_progress. */
void responses_stream_start(ResponsesStream *st, StrBuf *out, const WireHead *h, const json_t *echo);
/* Reasoning goes to a reasoning item, content to a message item; an item opens at its first
 * text and closes when the other kind starts. */
void responses_stream_text(ResponsesStream *st, StrBuf *out, const WireHead *h, const char *reasoning, size_t reasoning_len,
                           const char *content, size_t content_len);
/* A tool call just completed (the index-th of the reply): closes the open item and sends the
 * call as a function_call item. */
void responses_stream_tool(ResponsesStream *st, StrBuf *out, const WireHead *h, size_t index, const json_t *call);
/* Closes the open item, then response.completed (or response.incomplete) with the whole
 * response a; frees the stream's buffer. */
void responses_stream_end(ResponsesStream *st, StrBuf *out, const WireHead *h, const ResponsesAnswer *a, const WireUsage *u);
/* An error after the stream began (an `error` event); frees the stream's buffer. */
void responses_stream_error(ResponsesStream *st, StrBuf *out, const ApiError *e);

#endif

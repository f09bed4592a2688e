/* anthropic.h - the Anthropic Messages API (POST /v1/messages) on top of the same generation as
 * the OpenAI endpoints.
 *
 * Requests: model, max_tokens (required), messages (user / assistant; content a string or text,
 * tool_use, tool_result and thinking blocks; cache_control hints accepted: the server reuses
 * prompt prefixes by itself), system (a string or text blocks), stop_sequences (up to 4),
 * stream, temperature (0..1), top_p, top_k, tools (custom tools with an input_schema),
 * tool_choice (auto, any, tool, none, disable_parallel_tool_use: constrained decoding as for
 * OpenAI's tool_choice), thinking (K3 always thinks: disabled is K3's low effort, an enabled
 * budget_tokens picks low below 4096, high below 16384, else max), output_config (effort low /
 * medium / high as OpenAI's reasoning_effort; format json_schema as OpenAI's strict
 * response_format), metadata.user_id. They are translated into the OpenAI-shaped chat request
 * (request.h) the renderer takes; what cannot be honoured (images, documents, server tools, a
 * prefilled assistant reply as the last message) is refused naming the field.
 * Without a temperature decoding is greedy, exact.
 *
 * Answers: a message with thinking, text and tool_use content blocks, stop_reason end_turn /
 * max_tokens / stop_sequence / tool_use (a max_tokens that came early says why in
 * "finish_detail", an extension), usage with cache_read_input_tokens; streamed as
 * message_start, content_block_start / _delta / _stop per block, message_delta, message_stop.
 * Errors: {"type": "error", "error": {"type", "message"}} with Anthropic's type per status.
 * Every function that returns a string returns a new one the caller frees. */
#ifndef DF_ANTHROPIC_H
#define DF_ANTHROPIC_H

#include <jansson.h>
#include <stddef.h>

#include "serve/request.h"
#include "serve/wire.h"
#include "text/strbuf.h"

/* Parses and validates a /v1/messages body into r (r->anthropic set); model_id: the served
 * model's name; counting: a /v1/messages/count_tokens body (no max_tokens). Returns 0, or -1
 * with *err filled. */
int anthropic_request_parse(const char *body, size_t len, const char *model_id, int counting, ApiRequest *r, ApiError *err);

/* GET /v1/models in Anthropic's shape (for clients that send anthropic-version); one: the model
 * object alone. */
char *anthropic_models(const char *model, int64_t created, int one);

char *anthropic_error(const ApiError *e);

/* How an answer ended, in Anthropic's words. */
typedef struct {
    const char *finish;        /* the exchange's: "stop" | "length" | "tool_calls" */
    const char *stop_sequence; /* the sequence that stopped it (stop_len bytes), or NULL */
    size_t stop_len;
    const char *detail;        /* why max_tokens came early (exchange.h: "repetition", "thinking"), or NULL */
} AnthropicEnd;

/* The whole message. tool_calls: OpenAI-style calls (borrowed) or NULL. */
char *anthropic_message(const WireHead *h, const char *reasoning, size_t reasoning_len, const char *content,
                        size_t content_len, const json_t *tool_calls, const AnthropicEnd *end, const WireUsage *u);

/* A streamed message: which content block is open. */
typedef struct {
    int index;   /* of the next block */
    int open;    /* 0: none, 1: thinking, 2: text */
} AnthropicStream;

/* message_start (usage so far: the prompt). */
void anthropic_stream_start(AnthropicStream *st, StrBuf *out, const WireHead *h, const WireUsage *u);
/* Reasoning goes to a thinking block, content to a text block; a block opens at its first text
 * and closes when the other kind starts. */
void anthropic_stream_text(AnthropicStream *st, StrBuf *out, const char *reasoning, size_t reasoning_len,
                           const char *content, size_t content_len);
/* A tool call just completed (the index-th of the reply): closes the open block and sends the
 * call as a tool_use block (start, its input as one input_json_delta, stop). */
void anthropic_stream_tool(AnthropicStream *st, StrBuf *out, const WireHead *h, size_t index, const json_t *call);
/* Closes the open block, then message_delta (stop reason, output tokens) and message_stop. */
void anthropic_stream_end(AnthropicStream *st, StrBuf *out, const AnthropicEnd *end, const WireUsage *u);
/* An error after the stream began. */
void anthropic_stream_error(StrBuf *out, const ApiError *e);

#endif

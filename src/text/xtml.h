/* xtml.h - K3's chat format ("XTML", docs/MODEL.md 6.3): rendering an OpenAI-style conversation
 * into token ids, and parsing the model's reply as it is generated.
 *
 * Rendering produces segments that are tokenised independently (regex and BPE never cross a
 * segment boundary): the markers <|open|> <|sep|> <|close|> <|end_of_msg|> (and the image
 * placeholder) are trusted segments and become special ids; tag names, attribute text and all
 * message content are ordinary text, so special spellings inside content stay plain text.
 *   open(tag, attrs) = <|open|> | tag | " key" | =" | escape(value) | " | ... | <|sep|>
 *   close(tag)       = <|close|> | tag | <|sep|>
 * In order: tool declarations (if tools are given), the thinking-effort message (if thinking
 * is on), each message, then the generation prompt. Not supported (refused with a message, not
 * silently dropped): system messages carrying lazily loaded `tools`, and the tool_choice /
 * response_format system messages, whose texts the spec does not record.
 *
 * Inferred details (the spec leaves them open): a message's text parts are joined with nothing
 * between them; an assistant message always has its response element, empty when it has no
 * content; tool results take the function name and 1-based index of the matching call of the
 * assistant message just before them (by tool_call_id), or their own `name` and position when
 * that message made no calls; tool-call arguments that are valid JSON but not an object are
 * rendered like invalid JSON (one raw `json` element). */
#ifndef DF_XTML_H
#define DF_XTML_H

#include <jansson.h>
#include <stddef.h>

#include "text/tokenizer.h"

typedef struct {
    const json_t *tools; /* OpenAI "tools" array, or NULL */
    const char *effort;  /* "low" | "high" | "max"; NULL means "max". Ignored when thinking is off */
    int thinking;        /* 1: think element and effort message (K3's default); 0: answer directly */
    int gen_prompt;      /* 1: end with the assistant generation prompt */
} XtmlOptions;

#define XTML_OPTIONS_DEFAULT {NULL, NULL, 1, 1}

/* Renders messages (a JSON array of OpenAI chat messages) and appends the ids to out. Returns 0,
 * or -1 with a message naming the offending field ("messages[2].tool_calls[0].function: ..."). */
int xtml_render(const Tokenizer *tok, const json_t *messages, const XtmlOptions *opt, TokIds *out);

/* The same rendering as text (segments concatenated), for display and tests. New string the
 * caller frees, or NULL with a message. */
char *xtml_render_text(const json_t *messages, const XtmlOptions *opt, size_t *len);

/* --- parsing the reply --- */

/* What one generated token produced. Text pointers stay valid until the next feed. */
typedef struct {
    const char *reasoning; /* thinking-channel text (reasoning_content) */
    size_t reasoning_len;
    const char *content;   /* answer text */
    size_t content_len;
    int done;              /* <|end_of_msg|> was generated: stop */
    int channel;           /* where the token's own bytes went: XTML_MARKUP (a marker, a header, a
                            * call's argument: nothing a client reads as text), XTML_THINKING or
                            * XTML_ANSWER (even when held back as part of a split character) */
} XtmlDelta;

enum { XTML_MARKUP, XTML_THINKING, XTML_ANSWER };

typedef struct XtmlParser XtmlParser;

/* A parser for the reply that follows a generation prompt rendered with the same thinking
 * setting (the reply starts inside <think> when thinking is on, inside <response> otherwise).
 * NULL with a message when tok lacks K3's markers. */
XtmlParser *xtml_parser_new(const Tokenizer *tok, int thinking);
void xtml_parser_free(XtmlParser *p);

/* Feeds one generated id. Structural markers and element headers never reach the text; a
 * character split across tokens is held until complete. Returns 0, or -1 with a message for
 * an id outside the vocabulary. */
int xtml_parser_feed(XtmlParser *p, int32_t id, XtmlDelta *d);
/* Ends a reply cut short (no <|end_of_msg|>): releases held bytes as U+FFFD. */
void xtml_parser_finish(XtmlParser *p, XtmlDelta *d);

/* 1 while the reply is inside its think element: from the start when thinking is on, until a
 * close of think (or of an element around it) takes effect at its <|sep|>; a header still being
 * read changes nothing yet. 0 once <|end_of_msg|> ended the reply. What a reply cut short needs
 * closed: the think element, or the response it has moved on to. */
int xtml_parser_in_thinking(const XtmlParser *p);

/* The tool calls completed so far, in order: a JSON array of OpenAI-style
 * {"type": "function", "function": {"name": ..., "arguments": "<JSON text>"}} (the caller adds
 * ids). Borrowed: valid until the parser is freed. */
const json_t *xtml_parser_tool_calls(const XtmlParser *p);

#endif

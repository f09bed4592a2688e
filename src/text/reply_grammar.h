/* reply_grammar.h - the output constraint of a chat request: OpenAI's response_format, tools,
 * tool_choice and parallel_tool_calls turned into one Grammar over K3's whole reply (the chat
 * format of docs/MODEL.md 6.3, as src/text/xtml_parse.c reads it):
 *
 *   [THINKING <|close|>think<|sep|><|open|>response<|sep|>]   (when the reply starts inside think)
 *   RESPONSE <|close|>response<|sep|>
 *   [<|open|>tools<|sep|> CALL... <|close|>tools<|sep|>]
 *   <|close|>message<|sep|><|end_of_msg|>
 *
 * THINKING is free text (any ordinary tokens, no markers), so it can only end by closing the
 * think element properly. RESPONSE is free text, or with response_format json_object /
 * json_schema the compact JSON of a valid value (jsonschema.h). Each CALL is
 *   <|open|>call tool="NAME" index="I"<|sep|> ARGUMENT... <|close|>call<|sep|>
 * with NAME a declared function, I its 1-based position, and the arguments of jsonschema.h's
 * jsonschema_arguments for that function's parameters; xtml_parse.c turns each into an OpenAI
 * tool call whose arguments validate against the parameters.
 *
 * tool_choice: "none" no tools element; "auto" (or absent) tools optional; "required" at least
 * one call; {"type":"function","function":{"name":N}} calls of N only, at least one.
 * parallel_tool_calls false: at most one call. No tools declared: no tools element, whatever
 * the choice (a model trained on tools it was given once may still try to call them). A free
 * text RESPONSE is at least one character unless calls follow it, so a reply that may not call
 * always answers something. Every chat gets a grammar: even the freest reply is bound to name
 * only declared tools.
 *
 * Every tool's parameters are compiled the same way whatever tool_choice says (none included),
 * so a schema refused under "required" is refused under "auto" and "none" too; each call's
 * arguments are bound to its function's schema whenever a call is made (strict functions with
 * strict mode's extra rules).
 *
 * Hostile requests: every field is checked here (types, names, duplicates) and schemas are
 * compiled with jsonschema.h's caps; refusals name the field. */
#ifndef DF_REPLY_GRAMMAR_H
#define DF_REPLY_GRAMMAR_H

#include <jansson.h>

#include "text/grammar.h"

struct VocabTrie;

typedef struct {
    const struct VocabTrie *vocab; /* the vocabulary replies are decoded in (budgets count its tokens) */
    const json_t *response_format; /* the request's object, or NULL */
    const json_t *tools;           /* the request's array, or NULL */
    const json_t *tool_choice;     /* the request's value, or NULL */
    int parallel_tool_calls;       /* 0 only when the request says false */
    int thinking;                  /* the reply starts inside the think element */
} ReplySpec;

/* Sets *out to the reply's grammar (the caller frees it with grammar_free). Returns 0, or -1 with a message that starts with the request
 * field at fault, e.g. "response_format.json_schema.schema.properties.when: 'format' is not
 * supported: ..." or "tools[1].function.name: ...". */
int reply_grammar(const ReplySpec *spec, Grammar **out);

/* A bare JSON value (schema NULL: any object) followed by <|end_of_msg|>, with no chat
 * structure around it, for matchers on vocab. Returns 0 and *out, or -1 with a message
 * prefixed by where. */
int json_grammar(const json_t *schema, int strict, const char *where, const struct VocabTrie *vocab, Grammar **out);

#endif

/* Parsing the model's reply as it streams: reasoning and answer split at the think/response
 * boundary with every marker and header kept out of the text, characters split across tokens
 * held until complete, tool calls rebuilt into OpenAI's shape, <|end_of_msg|> as the stop, and
 * whether a reply cut short is still in its thinking. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/strbuf.h"
#include "text/utf8.h"
#include "text/xtml.h"
#include "tokenizer_fixture.h"

static Tokenizer *tok;

typedef struct {
    StrBuf reasoning, content;
    int done_at; /* index of the feed that reported done, -1 if none */
} Reply;

static void collect(Reply *r, const XtmlDelta *d) {
    if (d->reasoning_len) sb_add(&r->reasoning, d->reasoning, d->reasoning_len);
    if (d->content_len) sb_add(&r->content, d->content, d->content_len);
}

/* Feeds the ids of `reply` (markers as special tokens) plus `extra` ids after it. */
static Reply feed_all(XtmlParser *p, const char *reply, const int32_t *extra, size_t n_extra) {
    Reply r = {{0}, {0}, -1};
    TokIds ids = fixture_encode(tok, reply, 1);
    for (size_t i = 0; i < n_extra; i++) tokids_push(&ids, extra[i]);
    for (size_t i = 0; i < ids.n; i++) {
        XtmlDelta d;
        CHECK(xtml_parser_feed(p, ids.v[i], &d) == 0);
        collect(&r, &d);
        if (d.done && r.done_at < 0) r.done_at = (int)i;
    }
    tokids_free(&ids);
    sb_add(&r.reasoning, "", 0), sb_add(&r.content, "", 0);
    return r;
}

static void reply_free(Reply *r) { sb_free(&r->reasoning), sb_free(&r->content); }

static void reasoning_and_answer_split_at_the_response_marker(void) {
    XtmlParser *p = xtml_parser_new(tok, 1);
    const char *reply = "Let me think: 2+2 is 4, caf\xc3\xa9.<|close|>think<|sep|><|open|>response<|sep|>It is **4**."
                        "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
    Reply r = feed_all(p, reply, (int32_t[]){'x', 'y'}, 2);
    CHECK_MSG(!strcmp(r.reasoning.p, "Let me think: 2+2 is 4, caf\xc3\xa9."), "reasoning '%s'", r.reasoning.p);
    CHECK_MSG(!strcmp(r.content.p, "It is **4**."), "content '%s'", r.content.p);
    TokIds ids = fixture_encode(tok, reply, 1);
    CHECK(r.done_at == (int)ids.n - 1); /* done exactly at <|end_of_msg|>; later ids add nothing */
    CHECK(json_array_size(xtml_parser_tool_calls(p)) == 0);
    tokids_free(&ids);
    reply_free(&r);
    xtml_parser_free(p);
}

static void a_character_split_across_tokens_is_held(void) {
    XtmlParser *p = xtml_parser_new(tok, 0); /* thinking off: the reply starts in the response */
    XtmlDelta d;
    CHECK(xtml_parser_feed(p, 0xE2, &d) == 0 && d.content_len == 0); /* byte tokens: ranks = byte values */
    CHECK(xtml_parser_feed(p, 0x82, &d) == 0 && d.content_len == 0);
    CHECK(xtml_parser_feed(p, 0xAC, &d) == 0 && d.content_len == 3 && !memcmp(d.content, "\xe2\x82\xac", 3));
    CHECK(xtml_parser_feed(p, 0xE2, &d) == 0 && d.content_len == 0);
    xtml_parser_finish(p, &d); /* cut short: the held byte becomes U+FFFD */
    CHECK(d.content_len == 3 && !memcmp(d.content, "\xef\xbf\xbd", 3));
    CHECK(xtml_parser_feed(p, tok_vocab_size(tok), &d) == -1);
    xtml_parser_free(p);
}

static void tool_calls_become_openai_calls(void) {
    XtmlParser *p = xtml_parser_new(tok, 1);
    const char *reply =
        "Need weather.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
        "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
        "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris &amp; \"centre\"<|close|>argument<|sep|>"
        "<|open|>argument key=\"a &quot;q&quot;\" type=\"number\"<|sep|>3.5<|close|>argument<|sep|>"
        "<|open|>argument key=\"flags\" type=\"array\"<|sep|>[true, null]<|close|>argument<|sep|>"
        "<|open|>argument key=\"bad\" type=\"number\"<|sep|>not a number<|close|>argument<|sep|>"
        "<|close|>call<|sep|><|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>"
        "raw {<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
    Reply r = feed_all(p, reply, NULL, 0);
    CHECK(!strcmp(r.reasoning.p, "Need weather.") && !strcmp(r.content.p, ""));
    char *calls = json_dumps(xtml_parser_tool_calls(p), JSON_COMPACT);
    const char *want =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\": \\\"Paris &amp; \\\\\\\"centre\\\\\\\"\\\", \\\"a \\\\\\\"q\\\\\\\"\\\": 3.5, "
        "\\\"flags\\\": [true, null], \\\"bad\\\": \\\"not a number\\\"}\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"raw {\"}}]";
    CHECK_MSG(!strcmp(calls, want), "\n got: %s\nwant: %s", calls, want);
    free(calls);
    reply_free(&r);
    xtml_parser_free(p);
}

/* What the renderer writes for an assistant turn, the parser reads back. */
static void rendered_tool_calls_parse_back(void) {
    const char *args = "{\"q\": \"caf\\u00e9 \\\"x\\\"\", \"n\": 2, \"f\": 0.5, \"o\": {\"k\": [1, \"s\"]}, \"z\": null}";
    json_t *msgs = json_pack("[{s:s, s:s, s:s, s:[{s:s, s:{s:s, s:s}}]}]", "role", "assistant", "reasoning_content",
                             "Plan.", "content", "Calling.", "tool_calls", "id", "c1", "function", "name", "lookup",
                             "arguments", args);
    XtmlOptions opt = {NULL, NULL, 1, 0};
    char *text = xtml_render_text(msgs, &opt, NULL);
    const char *start = strstr(text, "<|open|>think<|sep|>") + strlen("<|open|>think<|sep|>");
    XtmlParser *p = xtml_parser_new(tok, 1);
    Reply r = feed_all(p, start, NULL, 0);
    CHECK(!strcmp(r.reasoning.p, "Plan.") && !strcmp(r.content.p, "Calling.") && r.done_at >= 0);
    const json_t *call = json_array_get(xtml_parser_tool_calls(p), 0);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "lookup"));
    json_t *got = json_loads(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), 0, NULL);
    json_t *want = json_loads(args, 0, NULL);
    CHECK(got && json_equal(got, want));
    json_decref(got), json_decref(want), json_decref(msgs);
    free(text);
    reply_free(&r);
    xtml_parser_free(p);
}

static void feed_text(XtmlParser *p, const char *text) {
    Reply r = feed_all(p, text, NULL, 0);
    reply_free(&r);
}

/* Where a reply cut short stands: in its thinking from the start until the think element is
 * closed (by its own close or an enclosing one, at the <|sep|>), never with thinking off or
 * after <|end_of_msg|>. */
static void in_thinking_follows_the_think_element(void) {
    XtmlParser *p = xtml_parser_new(tok, 1);
    CHECK(xtml_parser_in_thinking(p) == 1);
    feed_text(p, "Hmm, <|open|>b<|sep|>bold<|close|>b<|sep|> so.");
    CHECK(xtml_parser_in_thinking(p) == 1);
    feed_text(p, "<|close|>think"); /* the header is not over yet */
    CHECK(xtml_parser_in_thinking(p) == 1);
    feed_text(p, "<|sep|>");
    CHECK(xtml_parser_in_thinking(p) == 0); /* closed, no answer text yet */
    feed_text(p, "<|open|>response<|sep|>Hi");
    CHECK(xtml_parser_in_thinking(p) == 0);
    xtml_parser_free(p);
    p = xtml_parser_new(tok, 1);
    feed_text(p, "x<|close|>message<|sep|>"); /* closing the message closes the think inside it */
    CHECK(xtml_parser_in_thinking(p) == 0);
    xtml_parser_free(p);
    p = xtml_parser_new(tok, 1);
    feed_text(p, "x<|end_of_msg|>");
    CHECK(xtml_parser_in_thinking(p) == 0);
    xtml_parser_free(p);
    p = xtml_parser_new(tok, 0);
    CHECK(xtml_parser_in_thinking(p) == 0);
    feed_text(p, "<|open|>think<|sep|>"); /* an element named think opened later counts too */
    CHECK(xtml_parser_in_thinking(p) == 1);
    xtml_parser_free(p);
}

/* Random id sequences, markers included: the parser never fails on a valid id and only ever
 * returns whole UTF-8 characters. */
static void random_replies_never_break_the_parser(void) {
    srand(11);
    int32_t markers[] = {tok_special_id(tok, "<|open|>"), tok_special_id(tok, "<|close|>"),
                         tok_special_id(tok, "<|sep|>"), tok_special_id(tok, "[BOS]")};
    for (int trial = 0; trial < 300; trial++) {
        XtmlParser *p = xtml_parser_new(tok, trial & 1);
        for (int i = 0; i < 200; i++) {
            int32_t id = rand() % 3 ? rand() % 300 : markers[rand() % 4];
            XtmlDelta d;
            CHECK(xtml_parser_feed(p, id, &d) == 0);
            CHECK(utf8_valid_len((const uint8_t *)d.reasoning, d.reasoning_len) == d.reasoning_len);
            CHECK(utf8_valid_len((const uint8_t *)d.content, d.content_len) == d.content_len);
        }
        xtml_parser_free(p);
    }
}

int main(void) {
    tok = fixture_synth(2000, NULL);
    RUN(reasoning_and_answer_split_at_the_response_marker);
    RUN(a_character_split_across_tokens_is_held);
    RUN(tool_calls_become_openai_calls);
    RUN(rendered_tool_calls_parse_back);
    RUN(in_thinking_follows_the_think_element);
    RUN(random_replies_never_break_the_parser);
    tok_free(tok);
    fixture_cleanup();
    return check_summary();
}

/* K3 chat rendering (docs/MODEL.md 6.3): golden text for every message kind, the spec's own
 * example down to its <|open|> count, segmentation and escaping, refused inputs, and Python's
 * json.dumps formatting (expected strings printed by Python 3.11). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/pyjson.h"
#include "text/xtml.h"
#include "tokenizer_fixture.h"

#define EFFORT_BODY(e)                                                                                          \
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response "      \
    "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with " \
    "`thinking_effort=" e "`."
#define EFFORT_MSG(e) \
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>" EFFORT_BODY(e) "<|close|>message<|sep|><|end_of_msg|>"
#define GEN_THINK "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"

static Tokenizer *tok;

static char *render_text(const char *messages_json, const XtmlOptions *opt) {
    json_t *m = json_loads(messages_json, 0, NULL);
    CHECK(m != NULL);
    char *s = xtml_render_text(m, opt, NULL);
    json_decref(m);
    return s;
}

static void check_golden(const char *messages_json, const XtmlOptions *opt, const char *want) {
    char *got = render_text(messages_json, opt);
    CHECK_MSG(got && !strcmp(got, want), "\n got: %s\nwant: %s", got ? got : df_errmsg(), want);
    free(got);
}

static void spec_example_renders_with_four_open_ids(void) {
    const char *msgs = "[{\"role\": \"user\", \"content\": \"Hello <|open|> & goodbye\"}]";
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    check_golden(msgs, &opt,
                 EFFORT_MSG("max") "<|open|>message role=\"user\"<|sep|>Hello <|open|> & goodbye<|close|>message<|sep|>"
                                   "<|end_of_msg|>" GEN_THINK);
    json_t *m = json_loads(msgs, 0, NULL);
    TokIds ids = {0};
    CHECK(xtml_render(tok, m, &opt, &ids) == 0);
    int32_t open = tok_special_id(tok, "<|open|>");
    size_t opens = 0;
    for (size_t i = 0; i < ids.n; i++) opens += ids.v[i] == open;
    CHECK(opens == 4);
    /* content stays ordinary text: its ids are those of the content encoded on its own */
    TokIds content = fixture_encode(tok, "Hello <|open|> & goodbye", 0);
    int found = 0;
    for (size_t i = 0; i + content.n <= ids.n && !found; i++)
        found = !memcmp(ids.v + i, content.v, content.n * sizeof *ids.v);
    CHECK(found);
    tokids_free(&content), tokids_free(&ids);
    json_decref(m);
}

/* Ids are the concatenation of each segment encoded on its own. */
static void ids_are_segments_encoded_separately(void) {
    static const struct {
        const char *text;
        int trusted;
    } segs[] = {{"<|open|>", 1}, {"message", 0}, {" role", 0}, {"=\"", 0}, {"user", 0}, {"\"", 0}, {" name", 0},
                {"=\"", 0},      {"a&amp;b", 0}, {"\"", 0},     {"<|sep|>", 1}, {"hi there", 0}, {"<|close|>", 1},
                {"message", 0},  {"<|sep|>", 1}, {"<|end_of_msg|>", 1}};
    TokIds want = {0};
    for (size_t i = 0; i < sizeof segs / sizeof segs[0]; i++)
        tok_encode(tok, segs[i].text, strlen(segs[i].text), segs[i].trusted, &want);
    XtmlOptions opt = {NULL, NULL, 0, 0};
    json_t *m = json_loads("[{\"role\": \"user\", \"name\": \"a&b\", \"content\": \"hi there\"}]", 0, NULL);
    TokIds got = {0};
    CHECK(xtml_render(tok, m, &opt, &got) == 0);
    CHECK(got.n == want.n && !memcmp(got.v, want.v, want.n * sizeof *want.v));
    tokids_free(&got), tokids_free(&want);
    json_decref(m);
}

static void system_user_and_escaped_attributes(void) {
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.effort = "low";
    check_golden("[{\"role\": \"system\", \"content\": \"Be brief.\"},"
                 " {\"role\": \"user\", \"name\": \"Bob \\\"B\\\" & co\", \"content\": \"<|close|>x\"}]",
                 &opt,
                 EFFORT_MSG("low") "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
                 "<|open|>message role=\"user\" name=\"Bob &quot;B&quot; &amp; co\"<|sep|><|close|>x<|close|>message"
                 "<|sep|><|end_of_msg|>" GEN_THINK);
}

static void assistant_history_with_reasoning(void) {
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.effort = "high";
    check_golden("[{\"role\": \"user\", \"content\": \"2+2?\"},"
                 " {\"role\": \"assistant\", \"reasoning_content\": \"Add.\", \"content\": \"4\"},"
                 " {\"role\": \"assistant\", \"reasoning_content\": \" \\n \", \"content\": null}]",
                 &opt,
                 EFFORT_MSG("high") "<|open|>message role=\"user\"<|sep|>2+2?<|close|>message<|sep|><|end_of_msg|>"
                 "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>Add.<|close|>think<|sep|>"
                 "<|open|>response<|sep|>4<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
                 "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
                 "<|open|>response<|sep|><|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>" GEN_THINK);
}

static void tool_declarations_calls_and_reordered_results(void) {
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                               "{\"type\": \"object\", \"b\": 1.0, \"a\": [2, {\"y\": 1, \"x\": \"\\u00e9\"}]}}}]", 0, NULL);
    opt.tools = tools;
    check_golden(
        "[{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
        "{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
        "\"{\\\"q\\\": \\\"a \\\\\\\"b\\\\\\\"\\\", \\\"n\\\": 2.50, \\\"o\\\": {\\\"k\\\": [true, null]}}\"}},"
        "{\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"oops {\"}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": \"second\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"first\"}]",
        &opt,
        "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the available tools, described "
        "in JSONSchema.\n\n```json\n[{\"function\":{\"name\":\"f\",\"parameters\":{\"a\":[2,{\"x\":\"\xc3\xa9\",\"y\":1}],"
        "\"b\":1.0,\"type\":\"object\"}},\"type\":\"function\"}]\n```<|close|>message<|sep|><|end_of_msg|>" EFFORT_MSG("max")
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|><|open|>response<|sep|>"
        "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
        "<|open|>argument key=\"q\" type=\"string\"<|sep|>a \"b\"<|close|>argument<|sep|>"
        "<|open|>argument key=\"n\" type=\"number\"<|sep|>2.5<|close|>argument<|sep|>"
        "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": [true, null]}<|close|>argument<|sep|>"
        "<|close|>call<|sep|><|open|>call tool=\"g\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>oops {"
        "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"tool\" tool=\"f\" index=\"1\"<|sep|>first<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"tool\" tool=\"g\" index=\"2\"<|sep|>second<|close|>message<|sep|><|end_of_msg|>" GEN_THINK);
    json_decref(tools);
}

static void thinking_off_images_and_unanswered_tools(void) {
    XtmlOptions opt = {NULL, "medium", 0, 1}; /* effort is not used without thinking */
    check_golden("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Look \"},"
                 " {\"type\": \"image_url\", \"image_url\": {\"url\": \"u\"}}, {\"type\": \"text\", \"text\": \"here\"},"
                 " {\"type\": \"text\", \"text\": \"!\"}]},"
                 " {\"role\": \"assistant\", \"reasoning_content\": \"hidden\", \"content\": \"A cat.\"},"
                 " {\"role\": \"tool\", \"name\": \"lookup\", \"content\": \"x\"}]",
                 &opt,
                 "<|open|>message role=\"user\"<|sep|>Look <|kimi_image_placeholder|>here!<|close|>message<|sep|>"
                 "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>A cat.<|close|>response"
                 "<|sep|><|close|>message<|sep|><|end_of_msg|><|open|>message role=\"tool\" tool=\"lookup\" index=\"1\""
                 "<|sep|>x<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|>"
                 "<|open|>response<|sep|>");
}

static void expect_refused(const char *msgs, const char *effort, const char *needle) {
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.effort = effort;
    char *s = render_text(msgs, &opt);
    CHECK_MSG(!s && strstr(df_errmsg(), needle), "wanted '%s', got '%s'", needle, s ? s : df_errmsg());
    free(s);
}

static void unsupported_inputs_are_refused_clearly(void) {
    const char *hi = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    expect_refused(hi, "medium", "thinking effort 'medium' is not supported (use low, high or max)");
    expect_refused(hi, "ultra", "thinking effort 'ultra' is not supported");
    expect_refused("[{\"role\": \"developer\", \"content\": \"x\"}]", NULL, "messages[0].role: 'developer' is not supported");
    expect_refused("[{\"content\": \"x\"}]", NULL, "messages[0]: must be an object with a string role");
    expect_refused("{\"role\": \"user\"}", NULL, "messages: must be a JSON array");
    expect_refused("[{\"role\": \"user\", \"content\": 5}]", NULL, "messages[0].content: must be a string");
    expect_refused("[{\"role\": \"user\", \"content\": [{\"type\": \"audio\"}]}]", NULL,
                   "messages[0].content[0]: part type 'audio' is not supported");
    expect_refused("[{\"role\": \"system\", \"content\": \"x\", \"tools\": []}]", NULL, "messages[0].tools:");
    expect_refused("[{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"a\", \"function\": {\"name\": \"f\", "
                   "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": \"r\"}]",
                   NULL, "messages[1].tool_call_id: 'b' matches no call of the preceding assistant message");
    expect_refused("[{\"role\": \"tool\", \"content\": \"r\"}]", NULL, "messages[0].name: a tool message needs");
}

static void python_float_repr_and_json_dumps(void) {
    static const struct {
        double x;
        const char *repr;
    } cases[] = {{0.1, "0.1"},         {1.0, "1.0"},
                 {-0.0, "-0.0"},       {0.0, "0.0"},
                 {1e+16, "1e+16"},     {1000000000000000.0, "1000000000000000.0"},
                 {1.5e-05, "1.5e-05"}, {0.0001, "0.0001"},
                 {123456789.125, "123456789.125"}, {1e+22, "1e+22"},
                 {5e-324, "5e-324"},   {1.7976931348623157e+308, "1.7976931348623157e+308"},
                 {100.0, "100.0"},     {3.14159, "3.14159"},
                 {0.3333333333333333, "0.3333333333333333"}, {-2.5e-07, "-2.5e-07"},
                 {1.2345678901234568e+16, "1.2345678901234568e+16"}, {0.001, "0.001"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[40];
        pyjson_float_repr(cases[i].x, buf);
        CHECK_MSG(!strcmp(buf, cases[i].repr), "%s vs %s", buf, cases[i].repr);
    }
    json_t *v = json_loads("{\"b\": [1, 2.0, \"x\\\"\\\\\\n\\u0001\\u007f \\u00e9\"], \"a\": null, \"t\": true}", 0, NULL);
    StrBuf b = {0};
    pyjson_dump(v, PYJSON_SPACED, 0, &b);
    CHECK(!strcmp(b.p, "{\"b\": [1, 2.0, \"x\\\"\\\\\\n\\u0001\x7f \xc3\xa9\"], \"a\": null, \"t\": true}"));
    b.n = 0;
    pyjson_dump(v, PYJSON_COMPACT, 1, &b);
    CHECK(!strcmp(b.p, "{\"a\":null,\"b\":[1,2.0,\"x\\\"\\\\\\n\\u0001\x7f \xc3\xa9\"],\"t\":true}"));
    sb_free(&b);
    json_decref(v);
}

int main(void) {
    tok = fixture_synth(2000, NULL);
    RUN(spec_example_renders_with_four_open_ids);
    RUN(ids_are_segments_encoded_separately);
    RUN(system_user_and_escaped_attributes);
    RUN(assistant_history_with_reasoning);
    RUN(tool_declarations_calls_and_reordered_results);
    RUN(thinking_off_images_and_unanswered_tools);
    RUN(unsupported_inputs_are_refused_clearly);
    RUN(python_float_repr_and_json_dumps);
    tok_free(tok);
    fixture_cleanup();
    return check_summary();
}

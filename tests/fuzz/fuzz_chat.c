/* Chat rendering from a request body: {"messages": [...], "tools": [...], "thinking": bool,
 * "effort": "..."} rendered to ids (K3-style synthetic vocabulary) and to text, or refused with a
 * message naming the field. Ids and text describe the same rendering, and the reply parser
 * accepts the rendered ids. */
#include <jansson.h>

#include "fuzz.h"
#include "text/tokenizer.h"
#include "text/xtml.h"

static Tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tok = fuzz_load_tokenizer();
    return 0;
}

static void parse_reply(const TokIds *ids, int thinking) {
    XtmlParser *p = xtml_parser_new(tok, thinking);
    FUZZ_ASSERT(p);
    XtmlDelta d;
    for (size_t i = 0; i < ids->n; i++) {
        FUZZ_ASSERT(xtml_parser_feed(p, ids->v[i], &d) == 0);
        if (d.done) break;
    }
    xtml_parser_finish(p, &d);
    json_t *calls = (json_t *)xtml_parser_tool_calls(p);
    FUZZ_ASSERT(!calls || json_is_array(calls));
    xtml_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t jerr;
    json_t *req = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    json_t *thinking = json_object_get(req, "thinking"), *effort = json_object_get(req, "effort");
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.tools = json_object_get(req, "tools");
    opt.thinking = !json_is_false(thinking);
    opt.gen_prompt = !json_is_false(json_object_get(req, "add_generation_prompt"));
    if (json_is_string(effort)) opt.effort = json_string_value(effort);
    const json_t *msgs = json_object_get(req, "messages");
    TokIds ids = {0};
    size_t text_len;
    char *text = xtml_render_text(msgs, &opt, &text_len);
    int rc = xtml_render(tok, msgs, &opt, &ids);
    FUZZ_ASSERT((rc == 0) == (text != NULL));
    if (rc) fuzz_check_message();
    else {
        /* the ids decode to the rendered text (special markers spelled out) */
        size_t len;
        char *back = tok_decode(tok, ids.v, ids.n, &len);
        FUZZ_ASSERT(back && len == text_len && !memcmp(back, text, len));
        free(back);
        parse_reply(&ids, opt.thinking);
    }
    free(text);
    tokids_free(&ids);
    json_decref(req);
    return 0;
}

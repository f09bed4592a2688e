/* encode_data - turns the corpus and the chat conversations into the token-id files training
 * reads, with the engine's own tokenizer and chat renderer, so training sees exactly the ids
 * the engine produces at inference.
 *
 *   encode_data docs  --tokenizer DIR --in docs.jsonl  --out docs.bin
 *   encode_data chats --tokenizer DIR --in chats.jsonl --out chats.bin --mask chats.mask
 *
 * docs: each line {"text": ...}; the text is encoded as ordinary (untrusted) text and followed
 * by the [EOS] special id (first special + 1), which ends every document.
 * chats: each line {"messages": [...], "tools": [...]?, "reasoning_effort": ...?}; rendered in
 * K3's chat format with thinking on and no generation prompt, followed by [EOS]. The mask file
 * has one byte per id: 1 on what the model generates in an assistant turn (everything after
 * the generation prompt `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`: the
 * reasoning, the answer, the tool calls, the closing markers and <|end_of_msg|>), 0 elsewhere.
 * Every conversation is checked: its ids decode to its rendered text, and each assistant turn's
 * generation prompt is a prefix of the whole rendering.
 *
 * Ids are written as uint16 little-endian; the vocabulary must have at most 65,536 ids. One
 * JSON line of counts goes to stdout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/opts.h"
#include "cli/die.h"
#include "jsonl.h"
#include "text/tokenizer.h"
#include "text/xtml.h"
#include "util/err.h"
#include "util/fileio.h"

typedef struct {
    uint8_t *ids; /* uint16 little-endian */
    uint8_t *mask;
    size_t n, cap;
} Out;

static void out_push(Out *o, int32_t id, uint8_t m) {
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 1 << 20;
        o->ids = df_realloc(o->ids, o->cap * 2);
        o->mask = df_realloc(o->mask, o->cap);
    }
    o->ids[2 * o->n] = (uint8_t)(id & 0xff), o->ids[2 * o->n + 1] = (uint8_t)(id >> 8);
    o->mask[o->n++] = m;
}

static int encode_docs(const Tokenizer *tok, JsonlReader *r, Out *o, json_t *stats) {
    int32_t eos = tok_special_id(tok, "[EOS]");
    size_t docs = 0, bytes = 0;
    json_t *obj = NULL;
    int rc;
    while ((rc = jsonl_next(r, &obj)) == 1) {
        size_t len = 0;
        const char *text = jsonl_string(r, obj, "text", &len);
        TokIds ids = {0};
        rc = text ? tok_encode(tok, text, len, 0, &ids) : -1;
        json_decref(obj);
        for (size_t i = 0; i < ids.n && !rc; i++) out_push(o, ids.v[i], 0);
        tokids_free(&ids);
        if (rc) return -1;
        out_push(o, eos, 0);
        docs++, bytes += len;
    }
    json_object_set_new(stats, "documents", json_integer((json_int_t)docs));
    json_object_set_new(stats, "text_bytes", json_integer((json_int_t)bytes));
    return rc;
}

/* messages[0..n) as a new array (the elements shared). */
static json_t *head(const json_t *msgs, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append(a, json_array_get(msgs, i));
    return a;
}

static int render_head(const Tokenizer *tok, const json_t *msgs, size_t n, XtmlOptions opt, int gen, TokIds *ids) {
    json_t *h = head(msgs, n);
    opt.gen_prompt = gen;
    int rc = xtml_render(tok, h, &opt, ids);
    json_decref(h);
    return rc;
}

/* Marks mask[from..to) of each assistant turn: from = the length of the rendering up to its
 * generation prompt, to = the length of the rendering through the turn. */
static int mark_assistant_turns(const Tokenizer *tok, const json_t *msgs, const XtmlOptions *opt, const TokIds *all,
                                uint8_t *mask) {
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
        if (!role || strcmp(role, "assistant")) continue;
        TokIds prompt = {0}, through = {0};
        int rc = render_head(tok, msgs, i, *opt, 1, &prompt) || render_head(tok, msgs, i + 1, *opt, 0, &through);
        if (!rc && (through.n > all->n || prompt.n > through.n ||
                    memcmp(prompt.v, all->v, prompt.n * sizeof *prompt.v) ||
                    memcmp(through.v, all->v, through.n * sizeof *through.v)))
            rc = df_fail("messages[%zu]: the rendering up to this turn is not a prefix of the whole", i);
        if (!rc) memset(mask + prompt.n, 1, through.n - prompt.n);
        tokids_free(&prompt), tokids_free(&through);
        if (rc) return -1;
    }
    return 0;
}

/* Renders one conversation, checks that its ids decode to its text, appends ids and mask. */
static int encode_chat(const Tokenizer *tok, const json_t *obj, Out *o, size_t *assistant_ids) {
    const json_t *msgs = json_object_get(obj, "messages");
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.gen_prompt = 0;
    opt.tools = json_object_get(obj, "tools");
    opt.effort = json_string_value(json_object_get(obj, "reasoning_effort"));
    TokIds ids = {0};
    size_t text_len = 0, dec_len = 0;
    char *text = NULL, *dec = NULL;
    uint8_t *mask = NULL;
    int rc = xtml_render(tok, msgs, &opt, &ids);
    if (!rc) rc = (text = xtml_render_text(msgs, &opt, &text_len)) ? 0 : -1;
    if (!rc) rc = (dec = tok_decode(tok, ids.v, ids.n, &dec_len)) ? 0 : -1;
    if (!rc && (dec_len != text_len || memcmp(dec, text, text_len)))
        rc = df_fail("the ids do not decode to the rendered text");
    if (!rc) {
        mask = df_calloc(ids.n ? ids.n : 1, 1);
        rc = mark_assistant_turns(tok, msgs, &opt, &ids, mask);
    }
    for (size_t i = 0; i < ids.n && !rc; i++) {
        out_push(o, ids.v[i], mask[i]);
        *assistant_ids += mask[i];
    }
    free(text), free(dec), free(mask);
    tokids_free(&ids);
    return rc;
}

static int encode_chats(const Tokenizer *tok, JsonlReader *r, Out *o, json_t *stats) {
    int32_t eos = tok_special_id(tok, "[EOS]");
    size_t convs = 0, assistant_ids = 0;
    json_t *obj = NULL;
    int rc;
    while ((rc = jsonl_next(r, &obj)) == 1) {
        rc = encode_chat(tok, obj, o, &assistant_ids);
        json_decref(obj);
        if (rc) return df_failctx("%s:%zu", r->path, r->lineno);
        out_push(o, eos, 0);
        convs++;
    }
    json_object_set_new(stats, "conversations", json_integer((json_int_t)convs));
    json_object_set_new(stats, "assistant_tokens", json_integer((json_int_t)assistant_ids));
    return rc;
}

int main(int argc, char **argv) {
    const char *tok_dir = NULL, *in = NULL, *out = NULL, *mask = NULL;
    const CliOpt opts[] = {
        CLI_STR("tokenizer", 0, &tok_dir, "DIR", "directory with tiktoken.model and tokenizer_config.json"),
        CLI_STR("in", 0, &in, "FILE", "JSON Lines input: documents (docs) or conversations (chats)"),
        CLI_STR("out", 0, &out, "FILE", "token ids, uint16 little-endian"),
        CLI_STR("mask", 0, &mask, "FILE", "chats: one byte per id, 1 on the assistant's generated tokens"),
    };
    const CliCommand cmd = {"encode_data", "docs|chats --tokenizer DIR --in FILE --out FILE [--mask FILE]",
                            "Encodes the training data with the engine's tokenizer and chat format.", opts, CLI_N(opts), 1,
                            "docs or chats", 1};
    const char *pos[1];
    int n_pos;
    cli_parse(&cmd, NULL, argc, argv, pos, &n_pos);
    int chats = n_pos == 1 && !strcmp(pos[0], "chats");
    if (n_pos != 1 || (!chats && strcmp(pos[0], "docs"))) df_die("say what to encode: docs or chats (see --help)");
    if (!tok_dir || !in || !out || (chats && !mask)) df_die("--tokenizer, --in, --out (and --mask for chats) are required");
    Tokenizer *tok = tok_load(tok_dir);
    if (!tok) df_die("%s", df_errmsg());
    if (tok_vocab_size(tok) > 65536) df_die("%s: %d ids do not fit uint16", tok_dir, tok_vocab_size(tok));
    if (tok_special_id(tok, "[EOS]") < 0) df_die("%s: no [EOS] special token", tok_dir);
    JsonlReader r;
    Out o = {0};
    json_t *stats = json_object();
    if (jsonl_open(&r, in)) df_die("%s", df_errmsg());
    int rc = chats ? encode_chats(tok, &r, &o, stats) : encode_docs(tok, &r, &o, stats);
    jsonl_close(&r);
    if (!rc) rc = file_write_atomic(out, o.ids, o.n * 2);
    if (!rc && chats) rc = file_write_atomic(mask, o.mask, o.n);
    if (rc) df_die("%s", df_errmsg());
    json_object_set_new(stats, "tokens", json_integer((json_int_t)o.n));
    char *line = json_dumps(stats, JSON_SORT_KEYS);
    puts(line);
    free(line), free(o.ids), free(o.mask);
    json_decref(stats);
    tok_free(tok);
    return fflush(stdout) == 0 ? 0 : 1;
}

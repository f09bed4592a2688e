/* deltafin tokenize - print the token ids of the text on stdin, or of a chat rendered in K3's
 * format (--chat FILE), space-separated on one line. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/input.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "text/tokenizer.h"
#include "text/xtml.h"
#include "util/err.h"

#define MAX_INPUT_BYTES (1ull << 30)
#define MAX_CHAT_BYTES (256u << 20)

typedef struct {
    const char *effort;         /* --effort */
    const char *default_effort; /* K3_REASONING_EFFORT, or NULL */
    int no_thinking, no_gen, as_text;
} ChatFlags;

/* FILE holds a messages array, or a request object with "messages" (and optional "tools",
 * "reasoning_effort"). Effort: --effort, else the request's, else K3_REASONING_EFFORT, else max. */
static int render_chat(const Tokenizer *tok, const char *path, const ChatFlags *f, TokIds *ids, char **text,
                       size_t *text_len) {
    char *raw;
    size_t n;
    if (read_input(path, MAX_CHAT_BYTES, &raw, &n)) return -1;
    json_error_t e;
    json_t *root = json_loadb(raw, n, 0, &e);
    free(raw);
    if (!root) return df_fail("%s:%d: invalid JSON: %s", path, e.line, e.text);
    const json_t *msgs = json_is_object(root) ? json_object_get(root, "messages") : root;
    const char *req_effort = json_string_value(json_object_get(root, "reasoning_effort"));
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    opt.tools = json_object_get(root, "tools");
    opt.effort = f->effort ? f->effort : req_effort ? req_effort : f->default_effort;
    opt.thinking = !f->no_thinking;
    opt.gen_prompt = !f->no_gen;
    int rc;
    if (f->as_text) rc = (*text = xtml_render_text(msgs, &opt, text_len)) ? 0 : -1;
    else rc = xtml_render(tok, msgs, &opt, ids);
    json_decref(root);
    return rc ? df_failctx("%s", path) : 0;
}

static void print_ids(const TokIds *ids) {
    for (size_t i = 0; i < ids->n; i++) printf(i ? " %d" : "%d", ids->v[i]);
    putchar('\n');
}

/* --jsonl: each line of text is a JSON string, encoded on its own; one line of ids per line. */
static int encode_lines(const Tokenizer *tok, const char *text, size_t len, int trusted) {
    size_t line = 0;
    for (const char *p = text, *end = text + len; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_error_t e;
        json_t *s = json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        if (!json_is_string(s)) {
            json_decref(s);
            return df_fail("stdin:%zu: expected a JSON string per line", line + 1);
        }
        TokIds ids = {0};
        int rc = tok_encode(tok, json_string_value(s), json_string_length(s), trusted, &ids);
        json_decref(s);
        if (!rc) print_ids(&ids);
        tokids_free(&ids);
        if (rc) return -1;
        p += n + 1;
    }
    return 0;
}

int cmd_tokenize(Settings *set, int argc, char **argv) {
    const char *chat = NULL;
    int special = 0, jsonl = 0;
    ChatFlags f = {0};
    const CliOpt opts[] = {
        CLI_STR("chat", 0, &chat, "FILE",
         "render this chat JSON (a messages array, or a request with messages and tools; - or a pipe: stdin)"),
        CLI_FLAG("special", 0, &special, "stdin text is trusted: special-token spellings become special ids"),
        CLI_FLAG("jsonl", 0, &jsonl, "stdin holds one JSON string per line; print one line of ids for each"),
        CLI_FLAG("no-thinking", 0, &f.no_thinking, "--chat: render without the thinking channel"),
        CLI_FLAG("no-generation-prompt", 0, &f.no_gen, "--chat: do not end with the assistant prompt"),
        CLI_FLAG("text", 0, &f.as_text, "--chat: print the rendered text instead of ids"),
    };
    static const char about[] =
        "Prints the token ids of the text on stdin, space-separated on one line, or of a chat rendered in K3's "
        "format (--chat; its thinking effort: --effort, else the request's reasoning_effort, else "
        "DELTAFIN_REASONING_EFFORT, else max).";
    const CliCommand cmd = {"tokenize", "[options] [--chat FILE.json] < TEXT", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *from = settings_origin(set, settings_find("K3_REASONING_EFFORT"));
    f.effort = from && from[0] == '-' ? set->effort : NULL; /* given as --effort: before the request's */
    f.default_effort = set->effort;
    ModelDir m;
    cli_model_dir(set, MODEL_TOKENIZER, &m);
    Tokenizer *tok = tok_load(m.dir);
    if (!tok) df_die("%s", df_errmsg());
    TokIds ids = {0};
    char *text = NULL;
    size_t len;
    int rc;
    if (chat) rc = render_chat(tok, chat, &f, &ids, &text, &len);
    else if (!(rc = read_stream(stdin, "stdin", MAX_INPUT_BYTES, &text, &len))) {
        rc = jsonl ? encode_lines(tok, text, len, special) : tok_encode(tok, text, len, special, &ids);
        free(text);
        text = NULL;
    }
    if (rc) df_die("%s", df_errmsg());
    if (text) fwrite(text, 1, len, stdout);
    else if (!jsonl) print_ids(&ids);
    free(text);
    tokids_free(&ids);
    tok_free(tok);
    return fflush(stdout) == 0 ? 0 : 1;
}

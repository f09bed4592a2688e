/* deltafin logits - fp32 logits of every position of a token sequence, for quality checks. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/token_list.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/fileio.h"

typedef struct {
    float *all; /* [T][vocab] */
    int vocab;
} FeedTarget;

/* engine_feed's chunk_done: the chunk's rows in their place among all. */
static int keep_rows(void *ctx, size_t at, int T, const float *rows) {
    FeedTarget *t = ctx;
    memcpy(t->all + at * (size_t)t->vocab, rows, sizeof *rows * (size_t)T * (size_t)t->vocab);
    return 0;
}

int cmd_logits(Settings *set, int argc, char **argv) {
    const char *tokens = NULL, *tokens_file = NULL, *text = NULL, *out = NULL;
    int64_t chunk = 0;
    const CliOpt opts[] = {
        CLI_STR("tokens", 0, &tokens, "IDS", "token ids, space-separated"),
        CLI_STR("tokens-file", 0, &tokens_file, "FILE", "token ids read from FILE, whitespace-separated"),
        CLI_STR("text", 0, &text, "TEXT", "text to encode with the model's tokenizer (instead of --tokens)"),
        CLI_STR("out", 'o', &out, "FILE", "output file: little-endian fp32 [T][vocab]"),
        CLI_INT("chunk", 0, &chunk, "N", "positions per forward pass (default 0: the prefill window)", 0, MODEL_MAX_WINDOW),
    };
    static const char about[] =
        "Writes the fp32 logits of every position of a token sequence: row t is the prediction after token t. The "
        "hook for quality checks against other implementations.";
    const CliCommand cmd = {"logits", "[options] (--tokens \"1 2 3\" | --tokens-file FILE | --text TEXT) --out FILE", about,
                            opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!!tokens + !!tokens_file + !!text != 1 || !out)
        cli_usage_error(&cmd, "give --out and exactly one of --tokens, --tokens-file and --text");
    Engine *e = cli_open_engine(set, &set->engine, NULL);
    EngineInfo info;
    engine_info(e, &info);
    const int V = info.vocab;
    int *ids = NULL, n;
    if (tokens_file) {
        n = read_token_file(tokens_file, &ids, V);
    } else if (tokens) {
        ids = df_malloc(sizeof *ids * (size_t)(strlen(tokens) / 2 + 1));
        n = parse_token_list(tokens, ids, (int)(strlen(tokens) / 2 + 1), V);
    } else {
        Tokenizer *tok = engine_tokenizer(e);
        n = tok ? engine_encode_text(e, tok, text, strlen(text), &ids) : -1;
        tok_free(tok);
    }
    if (n < 0) df_die("%s", df_errmsg());
    if (n > info.max_context) df_die("logits: %d tokens exceed the context limit %d (DELTAFIN_CONTEXT)", n, info.max_context);
    float *rows = df_malloc(sizeof *rows * (size_t)n * V);
    State *st = state_create(engine_model(e));
    FeedTarget all = {rows, V};
    const int per_pass = chunk ? (int)chunk : model_max_rows(engine_model(e));
    FeedOptions fo = {.chunk = (int)chunk, .all_rows = 1, .rows = df_malloc(sizeof(float) * (size_t)(per_pass < n ? per_pass : n) * V),
                      .chunk_done = keep_rows, .ctx = &all};
    if (engine_feed(e, st, ids, (size_t)n, &fo)) df_die("%s", df_errmsg());
    free(fo.rows);
    if (file_write_atomic(out, rows, sizeof *rows * (size_t)n * V)) df_die("%s", df_errmsg());
    fprintf(stderr, "wrote logits [%d x %d] to %s\n", n, V, out);
    state_destroy(st);
    free(rows), free(ids);
    if (engine_close(e)) df_die("%s", df_errmsg());
    return 0;
}

/* deltafin logits - fp32 logits of every position of a token sequence, for quality checks. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
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

int cmd_logits(const Settings *set, int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *text = NULL, *out = NULL;
    int64_t chunk = MODEL_MAX_CHUNK;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"tokens", ARG_STR, &tokens, "token ids, space-separated"},
        {"text", ARG_STR, &text, "text to encode with the checkpoint's tokenizer (instead of --tokens)"},
        {"out", ARG_STR, &out, "output file: little-endian fp32 [T][vocab]"},
        {"chunk", ARG_INT, &chunk, "positions per forward pass (1..64, default 64)"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 5, pos, 0, &n_pos, "deltafin logits --model DIR --tokens \"1 2 3\" --out FILE"))
        df_die("%s", df_errmsg());
    if (!tokens == !text || !out) df_die("logits: give --out and exactly one of --tokens and --text");
    Engine e;
    if (engine_open(&e, settings_dir(set, model), &set->engine)) df_die("%s", df_errmsg());
    const int V = e.cat.cfg.vocab;
    int *ids = NULL, n;
    if (tokens) {
        ids = df_malloc(sizeof *ids * (size_t)(strlen(tokens) / 2 + 1));
        n = parse_token_list(tokens, ids, (int)(strlen(tokens) / 2 + 1), V);
    } else {
        Tokenizer *tok = engine_tokenizer(&e);
        n = tok ? engine_encode_text(&e, tok, text, strlen(text), &ids) : -1;
        tok_free(tok);
    }
    if (n < 0) df_die("%s", df_errmsg());
    if (n > e.max_context) df_die("logits: %d tokens exceed the context limit %d (K3_CONTEXT)", n, e.max_context);
    if (chunk < 1 || chunk > MODEL_MAX_CHUNK) df_die("logits: --chunk must be 1..%d", MODEL_MAX_CHUNK);
    float *rows = df_malloc(sizeof *rows * (size_t)n * V);
    State *st = state_create(e.model);
    FeedTarget all = {rows, V};
    FeedOptions fo = {(int)chunk, 1, df_malloc(sizeof(float) * (size_t)chunk * V), NULL, NULL, keep_rows, &all};
    if (engine_feed(&e, st, ids, (size_t)n, &fo)) df_die("%s", df_errmsg());
    free(fo.rows);
    if (file_write_atomic(out, rows, sizeof *rows * (size_t)n * V)) df_die("%s", df_errmsg());
    fprintf(stderr, "wrote logits [%d x %d] to %s\n", n, V, out);
    state_destroy(st);
    free(rows), free(ids);
    engine_close(&e);
    return 0;
}

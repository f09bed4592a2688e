/* deltafin nll - average negative log-likelihood of a token sequence: the quality harness that
 * compares exact and lossy modes, and the engine against other implementations of the model.
 *
 * The sequence is scored as one context, or (--window N) as consecutive windows of N tokens,
 * each from an empty state, the way a model trained on N-token windows is evaluated. --mask
 * counts only some targets (a chat's assistant turns); --argmax writes the greedy prediction of
 * every counted target, so two modes can be compared token by token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/token_list.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/fileio.h"

/* -log softmax(logits)[target], in double; *best receives the argmax (lowest index on ties). */
static double token_nll(const float *logits, int V, int target, int *best) {
    float mx = logits[0];
    int arg = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i], arg = i;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    *best = arg;
    return log(sum) - ((double)logits[target] - mx);
}

typedef struct {
    const int *ids;   /* the whole sequence */
    const int *mask;  /* 1 where ids[i] counts as a target, or NULL: all do */
    size_t base;      /* the window being fed starts at ids[base] */
    int vocab;
    FILE *argmax;     /* --argmax output, or NULL */
    double total;
    long counted;
} Scoring;

/* engine_feed's chunk_done: row t of the chunk at `at` predicts ids[base + at + t + 1]. */
static int score_chunk(void *ctx, size_t at, int T, const float *rows) {
    Scoring *sc = ctx;
    for (int t = 0; t < T; t++) {
        size_t target = sc->base + at + (size_t)t + 1;
        if (sc->mask && !sc->mask[target]) continue;
        int best;
        sc->total += token_nll(rows + (size_t)t * sc->vocab, sc->vocab, sc->ids[target], &best);
        sc->counted++;
        if (sc->argmax && fprintf(sc->argmax, "%d\n", best) < 0) return df_fail("nll: cannot write the argmax file");
    }
    return 0;
}

static int read_text_tokens(const Engine *e, const char *path, int **ids) {
    char *text;
    size_t len;
    Tokenizer *tok = engine_tokenizer(e);
    if (!tok || file_read_all(path, 256u << 20, &text, &len)) return tok_free(tok), -1;
    int n = engine_encode_text(e, tok, text, len, ids);
    free(text);
    tok_free(tok);
    return n < 0 ? df_failctx("%s", path) : n;
}

/* The mask file: one 0 or 1 per token of the sequence, whitespace-separated. */
static int *read_mask(const char *path, int n) {
    int *mask;
    int m = read_token_file(path, &mask, 2);
    if (m < 0) df_die("%s", df_errmsg());
    if (m != n) df_die("nll: %s has %d mask values for %d tokens", path, m, n);
    return mask;
}

int cmd_nll(Settings *set, int argc, char **argv) {
    const char *file = NULL, *text = NULL, *mask_path = NULL, *argmax_path = NULL;
    int64_t window = 0;
    const CliOpt opts[] = {
        CLI_STR("tokens-file", 0, &file, "FILE", "a file of whitespace-separated token ids"),
        CLI_STR("text", 0, &text, "FILE", "a file of UTF-8 text, encoded with the model's tokenizer"),
        CLI_INT("window", 0, &window, "N",
                "score consecutive windows of N tokens, each from an empty state (default: the whole sequence as one)", 2,
                INT32_MAX),
        CLI_STR("mask", 0, &mask_path, "FILE", "one 0/1 per token: count only the targets marked 1"),
        CLI_STR("argmax", 0, &argmax_path, "FILE", "write the greedy prediction of every counted target, one id per line"),
    };
    static const char about[] =
        "Average negative log-likelihood (and perplexity) of a token sequence: the quality harness for comparing "
        "the exact and the lossy modes (--spine int8, --moe-top-k N), and the engine against other implementations "
        "of the model (--window, --mask and --argmax score the way a model trained on windows is evaluated).";
    const CliCommand cmd = {"nll", "[options] (--tokens-file FILE | --text FILE) [--window N] [--mask FILE] [--argmax FILE]",
                            about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!file == !text) cli_usage_error(&cmd, "give exactly one of --tokens-file and --text");
    Engine *e = cli_open_engine(set, &set->engine, stderr); /* says which lossy modes (int8 spine, top-k) are on */
    EngineInfo info;
    engine_info(e, &info);
    const int V = info.vocab;
    int *ids;
    int n = file ? read_token_file(file, &ids, V) : read_text_tokens(e, text, &ids);
    if (n < 0) df_die("%s", df_errmsg());
    if (n < 2) df_die("nll: %s needs at least 2 tokens", file ? file : text);
    if (window == 0) window = n;
    if (window < 2 || window > info.max_context)
        df_die("nll: a window of %lld tokens is outside 2..%d (the context limit, DELTAFIN_CONTEXT)", (long long)window, info.max_context);
    Scoring sc = {ids, mask_path ? read_mask(mask_path, n) : NULL, 0, V, NULL, 0, 0};
    if (argmax_path && !(sc.argmax = fopen(argmax_path, "w"))) df_die("nll: cannot create %s", argmax_path);
    State *st = state_create(engine_model(e));
    FeedOptions fo = {.chunk = MODEL_LOGIT_ROWS, .all_rows = 1, .rows = df_malloc(sizeof(float) * (size_t)MODEL_LOGIT_ROWS * V),
                      .chunk_done = score_chunk, .ctx = &sc};
    int windows = 0;
    for (sc.base = 0; sc.base + 1 < (size_t)n; sc.base += (size_t)window, windows++) {
        size_t len = (size_t)n - sc.base < (size_t)window ? (size_t)n - sc.base : (size_t)window;
        state_reset(st);
        if (engine_feed(e, st, ids + sc.base, len - 1, &fo)) df_die("%s", df_errmsg());
    }
    if (sc.argmax && fclose(sc.argmax)) df_die("nll: cannot write %s", argmax_path);
    if (!sc.counted) df_die("nll: the mask marks no target");
    double mean = sc.total / (double)sc.counted;
    printf("nll %.6f over %ld predicted tokens (perplexity %.4f; %d window%s of up to %lld tokens)\n", mean, sc.counted,
           exp(mean), windows, windows == 1 ? "" : "s", (long long)window);
    free(fo.rows), free(ids), free((int *)sc.mask);
    state_destroy(st);
    if (engine_close(e)) df_die("%s", df_errmsg());
    return 0;
}

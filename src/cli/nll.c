/* deltafin nll - average negative log-likelihood of a token sequence: the quality harness that
 * compares exact and lossy modes. */
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

/* -log softmax(logits)[target], in double. */
static double token_nll(const float *logits, int V, int target) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

typedef struct {
    const int *ids; /* the sequence: row t of position at + t predicts ids[at + t + 1] */
    int vocab;
    double total;
} Scoring;

/* engine_feed's chunk_done: adds the chunk's rows' negative log-likelihoods. */
static int score_chunk(void *ctx, size_t at, int T, const float *rows) {
    Scoring *sc = ctx;
    for (int t = 0; t < T; t++) sc->total += token_nll(rows + (size_t)t * sc->vocab, sc->vocab, sc->ids[at + (size_t)t + 1]);
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

int cmd_nll(Settings *set, int argc, char **argv) {
    const char *file = NULL, *text = NULL;
    const CliOpt opts[] = {
        CLI_STR("tokens-file", 0, &file, "FILE", "a file of whitespace-separated token ids"),
        CLI_STR("text", 0, &text, "FILE", "a file of UTF-8 text, encoded with the model's tokenizer"),
    };
    static const char about[] =
        "Average negative log-likelihood (and perplexity) of a token sequence: the quality harness for comparing "
        "the exact and the lossy modes (--spine int8, --moe-top-k N).";
    const CliCommand cmd = {"nll", "[options] (--tokens-file FILE | --text FILE)", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!file == !text) cli_usage_error(&cmd, "give exactly one of --tokens-file and --text");
    Engine e;
    cli_open_engine(&e, set, &set->engine, stderr); /* says which lossy modes (int8 spine, top-k) are on */
    const int V = e.cat.cfg.vocab;
    int *ids;
    int n = file ? read_token_file(file, &ids, V) : read_text_tokens(&e, text, &ids);
    if (n < 0) df_die("%s", df_errmsg());
    if (n < 2) df_die("nll: %s needs at least 2 tokens", file ? file : text);
    if (n > e.max_context) df_die("nll: %d tokens exceed the context limit %d (K3_CONTEXT)", n, e.max_context);
    State *st = state_create(e.model);
    Scoring sc = {ids, V, 0};
    FeedOptions fo = {MODEL_MAX_CHUNK, 1, df_malloc(sizeof(float) * (size_t)MODEL_MAX_CHUNK * V), NULL, NULL, score_chunk, &sc};
    if (engine_feed(&e, st, ids, (size_t)n - 1, &fo)) df_die("%s", df_errmsg());
    double total = sc.total;
    printf("nll %.6f over %d predicted tokens (perplexity %.4f)\n", total / (n - 1), n - 1, exp(total / (n - 1)));
    free(fo.rows), free(ids);
    state_destroy(st);
    engine_close(&e);
    return 0;
}

/* deltafin nll - average negative log-likelihood of a token sequence: the quality harness that
 * compares exact and lossy modes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/engine.h"
#include "util/err.h"

/* -log softmax(logits)[target], in double. */
static double token_nll(const float *logits, int V, int target) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

int cmd_nll(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"tokens-file", ARG_STR, &file, "file of whitespace-separated token ids"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 2, pos, 0, &n_pos, "deltafin nll --model DIR --tokens-file F")) df_die("%s", df_errmsg());
    if (!file) df_die("nll: --tokens-file is required");
    Engine e;
    if (engine_open(&e, model)) df_die("%s", df_errmsg());
    const int V = e.cat.cfg.vocab;
    int *ids;
    int n = read_token_file(file, &ids, V);
    if (n < 0) df_die("%s", df_errmsg());
    if (n < 2) df_die("nll: %s needs at least 2 tokens", file);
    if (n > e.max_context) df_die("nll: %d tokens exceed the context limit %d (K3_CONTEXT)", n, e.max_context);
    State *st = state_create(e.model);
    float *rows = df_malloc(sizeof *rows * (size_t)MODEL_MAX_CHUNK * V);
    double total = 0;
    for (int at = 0; at < n - 1; at += MODEL_MAX_CHUNK) {
        int T = n - 1 - at < MODEL_MAX_CHUNK ? n - 1 - at : MODEL_MAX_CHUNK;
        if (model_forward(e.model, st, ids + at, T, rows, 1)) df_die("%s", df_errmsg());
        for (int t = 0; t < T; t++) total += token_nll(rows + (size_t)t * V, V, ids[at + t + 1]);
    }
    printf("nll %.6f over %d predicted tokens (perplexity %.4f)\n", total / (n - 1), n - 1, exp(total / (n - 1)));
    free(rows), free(ids);
    state_destroy(st);
    engine_close(&e);
    return 0;
}

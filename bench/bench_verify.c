/* bench_verify - what one speculative verify pass of n rows costs against a plain one-token pass,
 * on a checkpoint opened as `deltafin run` opens it (K3_STORE, K3_RAM_GB, K3_THREADS ... from the
 * environment). The speculation controller (src/engine/spec.c) keeps drafting only while
 * (1 + accepted) plain passes take longer than the verify pass that replaced them: this prints
 * the ratio that decides it.
 *
 *   build/bench/bench_verify MODEL_DIR [rounds] [rows...]      (defaults: 8 rounds; rows 1 2 3 5 9)
 *
 * Decodes greedily from a fixed 8-token prompt. A pass of n rows feeds the next greedy token and
 * n - 1 drafts (pseudo-random ids, fixed seed, so all but certainly rejected), then keeps one row:
 * the text advances one token per pass exactly as plain decoding does, and every pass meets the
 * expert cache that decoding leaves. Each round runs one pass of every row count, the order
 * rotated from round to round so that no row count always follows another; one round first warms
 * the cache and is not counted. Prints per row count the median seconds per pass, the range,
 * and the ratio of medians to the one-row pass. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "cli/settings.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/rng.h"

#define MAX_ROUNDS 1000

/* One pass of n rows after tok; returns the next greedy token (row 0's) or -1. */
static int pass(Model *m, int V, State *st, int tok, int n, Rng *r, float *rows, double *seconds) {
    int in[MODEL_MAX_VERIFY] = {tok};
    for (int i = 1; i < n; i++) in[i] = (int)(rng_next(r) % (uint64_t)V);
    double t0 = df_now();
    int rc = n == 1 ? model_forward(m, st, in, 1, rows, 1) : model_forward_verify(m, st, in, n, rows);
    if (rc) return -1;
    state_commit(st, 1);
    *seconds = df_now() - t0;
    return model_argmax(m, rows);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL_DIR [rounds] [rows...]\n", argv[0]), 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 8, n_sizes = argc > 3 ? argc - 3 : 5;
    int sizes[16] = {1, 2, 3, 5, 9};
    if (n_sizes > 16 || rounds < 1 || rounds > MAX_ROUNDS) return fprintf(stderr, "bad rounds or too many row counts\n"), 2;
    for (int i = 0; argc > 3 && i < n_sizes; i++) {
        sizes[i] = atoi(argv[3 + i]);
        if (sizes[i] < 1 || sizes[i] > MODEL_MAX_VERIFY)
            return fprintf(stderr, "rows must be 1..%d: %s\n", MODEL_MAX_VERIFY, argv[3 + i]), 2;
    }
    Settings set; /* the engine's settings from the environment, as deltafin reads them */
    Engine *e = NULL;
    if (settings_from_env(&set) || !(e = engine_open(argv[1], &set.engine))) return fprintf(stderr, "%s\n", df_errmsg()), 1;
    engine_print_settings(e, stderr);
    EngineInfo info;
    engine_info(e, &info);
    Model *m = engine_model(e);
    State *st = state_create(m);
    float *rows = malloc(sizeof *rows * (size_t)info.vocab * MODEL_MAX_VERIFY);
    double *t = malloc(sizeof *t * (size_t)rounds * (size_t)n_sizes);
    int prompt[8] = {840, 394, 783, 798, 911, 198, 335, 768};
    for (int i = 0; i < 8; i++) prompt[i] %= info.vocab; /* the tiny preset has 768 ids */
    Rng r;
    rng_seed(&r, 12345);
    int tok = -1;
    FeedOptions fo = {.chunk = 8, .rows = rows};
    if (engine_feed(e, st, prompt, 8, &fo) == 0) tok = model_argmax(m, rows);
    int need = (rounds + 1) * n_sizes * MODEL_MAX_VERIFY + 16;
    if (tok >= 0 && state_length(st) + need > info.max_context) tok = -1, fprintf(stderr, "context too small\n");
    for (int round = -1; round < rounds && tok >= 0; round++)
        for (int j = 0; j < n_sizes && tok >= 0; j++) {
            int k = (j + (round < 0 ? 0 : round)) % n_sizes;
            double s = 0;
            tok = pass(m, info.vocab, st, tok, sizes[k], &r, rows, &s);
            if (round >= 0) t[(size_t)k * rounds + round] = s;
        }
    int rc = tok < 0;
    if (rc) fprintf(stderr, "bench_verify: %s\n", df_errmsg());
    double base = 0;
    for (int k = 0; k < n_sizes && !rc; k++) {
        double *v = t + (size_t)k * rounds;
        qsort(v, (size_t)rounds, sizeof *v, bench_cmp_double);
        double med = rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2;
        if (k == 0) base = med;
        printf("verify rows %d: median %.6f s per pass (%.6f-%.6f over %d passes), %.2fx a %d-row pass\n", sizes[k], med,
               v[0], v[rounds - 1], rounds, base > 0 ? med / base : 0, sizes[0]);
    }
    free(t), free(rows);
    state_destroy(st);
    if (engine_close(e)) fprintf(stderr, "bench_verify: %s\n", df_errmsg()), rc = 1;
    return rc;
}

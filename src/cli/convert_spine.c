/* deltafin convert-spine - writes the int8 spine (store/i8spine.h) beside a checkpoint and prints
 * what it costs in quality.
 *
 * Resumable: each tensor file is written whole and renamed into place, so a rerun skips the
 * tensors whose file has the right header and size and (re)writes the rest. At the end it runs a
 * fixed 32-token sequence through the BF16 and the int8 spine and reports top-1 agreement,
 * top-5 order kept, the largest logit difference and the NLL difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "engine/engine.h"
#include "store/i8spine.h"
#include "util/err.h"

#define CHECK_TOKENS 32

static int convert_all(Engine *e) {
    SpineConversion r;
    if (engine_convert_spine(e, stderr, &r)) return -1;
    EngineInfo info;
    engine_info(e, &info);
    printf("convert-spine: %d tensors converted, %d already done (of %d) in %s/%s | spine matrices %.1f MB bf16\n",
           r.converted, r.skipped, r.total, info.dir, I8SPINE_SUBDIR, r.bf16_bytes / 1e6);
    return 0;
}

/* The indices of the 5 largest logits, largest first, lowest index on ties (like model_argmax). */
static void top5_of(const float *x, int V, int *out) {
    for (int k = 0; k < 5; k++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= out[j] == i;
            if (!taken && (best < 0 || x[i] > x[best])) best = i;
        }
        out[k] = best;
    }
}

static double nll_of(const float *x, int V, int target) {
    float mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)x[i] - mx);
    return log(sum) - ((double)x[target] - mx);
}

/* Logits of every position of ids through an engine opened with the given spine. */
static float *run_sequence(const char *dir, const EngineOptions *o, SpineChoice spine, const int *ids,
                           uint64_t *spine_bytes) {
    EngineOptions with = *o;
    with.spine = spine;
    Engine *e = engine_open(dir, &with);
    if (!e) return NULL;
    engine_print_settings(e, stderr);
    EngineInfo info;
    engine_info(e, &info);
    const int V = info.vocab;
    float *rows = df_malloc(sizeof *rows * (size_t)CHECK_TOKENS * V);
    State *st = state_create(engine_model(e));
    FeedOptions fo = {.chunk = CHECK_TOKENS, .all_rows = 1, .rows = rows}; /* one chunk: its rows are all of them */
    int rc = engine_feed(e, st, ids, CHECK_TOKENS, &fo);
    state_destroy(st);
    *spine_bytes = info.int8_spine_bytes;
    if (engine_close(e)) rc = -1;
    if (rc) free(rows), rows = NULL;
    return rows;
}

/* o: the user's settings (the check runs on the store they pick: streamed when the model is
 * larger than the memory budget). */
static int quality_check(const Engine *bf, const EngineOptions *o) {
    EngineInfo info;
    engine_info(bf, &info);
    const char *dir = info.dir;
    const int V = info.vocab;
    int ids[CHECK_TOKENS];
    for (int i = 0; i < CHECK_TOKENS; i++) ids[i] = (int)((1000003u * (unsigned)i + 12345u) % (unsigned)V);
    uint64_t bytes_bf16, bytes_i8;
    float *a = run_sequence(dir, o, SPINE_BF16, ids, &bytes_bf16);
    float *b = a ? run_sequence(dir, o, SPINE_INT8, ids, &bytes_i8) : NULL;
    if (!b) return free(a), -1;
    int top1 = 0, top5 = 0;
    double drift = 0, nll_a = 0, nll_b = 0;
    for (int t = 0; t < CHECK_TOKENS; t++) {
        const float *x = a + (size_t)t * V, *y = b + (size_t)t * V;
        int ta[5], tb[5];
        top5_of(x, V, ta), top5_of(y, V, tb);
        top1 += ta[0] == tb[0];
        top5 += !memcmp(ta, tb, sizeof ta);
        for (int i = 0; i < V; i++) drift = fabs((double)x[i] - y[i]) > drift ? fabs((double)x[i] - y[i]) : drift;
        if (t + 1 < CHECK_TOKENS) nll_a += nll_of(x, V, ids[t + 1]), nll_b += nll_of(y, V, ids[t + 1]);
    }
    nll_a /= CHECK_TOKENS - 1, nll_b /= CHECK_TOKENS - 1;
    printf("quality (%d fixed tokens, int8 vs bf16): top-1 agree %d/%d | top-5 order kept %d/%d | max logit drift %.4g "
           "| nll %.6f vs %.6f (diff %+.6f) | int8 spine %.1f MB\n",
           CHECK_TOKENS, top1, CHECK_TOKENS, top5, CHECK_TOKENS, drift, nll_b, nll_a, nll_b - nll_a, bytes_i8 / 1e6);
    free(a), free(b);
    return 0;
}

int cmd_convert_spine(Settings *set, int argc, char **argv) {
    int no_check = 0;
    const CliOpt opts[] = {CLI_FLAG("no-check", 0, &no_check, "skip the bf16 vs int8 quality check")};
    static const char about[] =
        "Writes the int8 spine (per-row int8 codes and an fp32 scale per row) into DIR/deltafin-int8/, resumably, "
        "and ends with a bf16 vs int8 check on 32 fixed tokens (top-1 agreement, top-5 order, largest logit "
        "difference, NLL difference). --spine int8 (DELTAFIN_SPINE) then uses it: lossy, about half the spine bytes.";
    const CliCommand cmd = {"convert-spine", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *dir = cli_install_dir(set); /* never the bundled model: this writes beside it */
    /* the source is the BF16 spine, read through a mapped store */
    EngineOptions source = set->engine;
    source.spine = SPINE_BF16;
    source.store.kind = STORE_MAPPED;
    Engine *e = engine_open(dir, &source);
    if (!e) df_die("%s", df_errmsg());
    if (convert_all(e) || (!no_check && quality_check(e, &set->engine))) df_die("%s", df_errmsg());
    if (engine_close(e)) df_die("%s", df_errmsg());
    return 0;
}

/* sample_args.c - sampling options of run and chat (see sample_args.h). */
#include "cli/sample_args.h"

#include <math.h>
#include <sys/random.h>
#include <time.h>

#include "util/err.h"

#define UNSET (-1e300)

void sample_args_specs(SampleArgs *a, CliOpt *opts) {
    *a = (SampleArgs){UNSET, 1, 0, 0, 0, 1, 0, INT64_MIN, 64};
    const CliOpt s[SAMPLE_ARG_SPECS] = {
        {"temperature", 0, OPT_DOUBLE, &a->temperature, "T", "sample at this temperature (0..2; default greedy, exact)",
         0, 0, "temp"},
        CLI_DOUBLE("top-p", 0, &a->top_p, "P", "keep the most probable tokens holding this much mass (0..1)"),
        CLI_INT("top-k", 0, &a->top_k, "K", "keep the k most probable tokens (0: all)", 0, 1 << 20),
        CLI_DOUBLE("min-p", 0, &a->min_p, "P", "keep tokens at least this fraction as probable as the best (0..1)"),
        CLI_INT("seed", 0, &a->seed, "S", "seed of the sampled choices (default random, printed)", -INT64_MAX, INT64_MAX),
        CLI_DOUBLE("presence-penalty", 0, &a->presence, "X", "subtract this from tokens already generated (-2..2)"),
        CLI_DOUBLE("frequency-penalty", 0, &a->frequency, "X", "subtract this per earlier occurrence (-2..2)"),
        CLI_DOUBLE("repeat-penalty", 0, &a->repeat, "X",
                   "llama.cpp's repetition penalty: the logit of a token among the last --repeat-last-n of the context "
                   "is divided by X when positive, multiplied when not (0..10; 1: off; lossy)"),
        CLI_INT("repeat-last-n", 0, &a->repeat_last_n, "N", "the repetition penalty's window (default 64; -1: all; 0: off)",
                -1, SAMPLE_MAX_REPEAT_LAST_N),
    };
    for (int i = 0; i < SAMPLE_ARG_SPECS; i++) opts[i] = s[i];
}

static void in_range(const CliCommand *cmd, const char *name, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi)) cli_usage_error(cmd, "--%s: %g is not in %g..%g", name, v, lo, hi);
}

int sample_args_finish(const CliCommand *cmd, SampleArgs *a, SampleParams *p, FILE *log) {
    *p = (SampleParams)SAMPLE_PARAMS_GREEDY;
    int temperature_given = a->temperature != UNSET;
    in_range(cmd, "top-p", a->top_p, 0, 1); /* 0 means the most probable token (below) */
    p->temperature = temperature_given ? a->temperature : 0;
    p->top_p = a->top_p, p->top_k = (int)a->top_k, p->min_p = a->min_p;
    p->presence_penalty = a->presence, p->frequency_penalty = a->frequency;
    p->repeat_penalty = a->repeat, p->repeat_last_n = (int)a->repeat_last_n;
    if (p->top_p == 0) p->top_p = 1, p->top_k = 1;
    if (!temperature_given && (p->top_p < 1 || p->top_k > 0 || p->min_p > 0)) p->temperature = 1;
    const char *field;
    if (sampler_check(p, &field)) { /* the sampler's rule, which the server applies too */
        char flag[32];
        snprintf(flag, sizeof flag, "%s", field);
        for (char *c = flag; *c; c++) *c = *c == '_' ? '-' : *c;
        cli_usage_error(cmd, "--%s: %s", flag, df_errmsg());
    }
    int penalised = p->presence_penalty != 0 || p->frequency_penalty != 0 || sampler_repeats(p);
    char repeat[80] = "";
    if (sampler_repeats(p)) snprintf(repeat, sizeof repeat, ", repeat penalty %g over %d", p->repeat_penalty, p->repeat_last_n);
    if (p->temperature == 0) {
        if (penalised && log)
            fprintf(log, "sampling: greedy with penalties %g/%g%s (deterministic, not the model's exact greedy choice)\n",
                    p->presence_penalty, p->frequency_penalty, repeat);
        return penalised;
    }
    if (a->seed != INT64_MIN) p->seed = (uint64_t)a->seed;
    else {
        if (getentropy(&p->seed, sizeof p->seed) != 0) p->seed = (uint64_t)time(NULL);
        p->seed &= INT64_MAX; /* printable, and accepted back by --seed */
    }
    if (log)
        fprintf(log, "sampling: temperature %g, top-p %g, top-k %d, min-p %g, penalties %g/%g%s, seed %lld (sampled, not exact)\n",
                p->temperature, p->top_p, p->top_k, p->min_p, p->presence_penalty, p->frequency_penalty, repeat,
                (long long)p->seed);
    return 1;
}

const char *sample_params_label(const SampleParams *p) {
    if (p->temperature > 0) return "sampled (seeded, not exact)";
    if (sampler_repeats(p)) return "greedy with a repetition penalty (not exact)";
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) return "greedy with penalties (not exact)";
    return "greedy";
}

/* sample_args.c - sampling options of run and chat (see sample_args.h). */
#include "cli/sample_args.h"

#include <math.h>
#include <sys/random.h>
#include <time.h>

#include "util/err.h"

#define UNSET (-1e300)

void sample_args_specs(SampleArgs *a, CliOpt *opts) {
    *a = (SampleArgs){UNSET, 1, 0, 0, 0, 0, INT64_MIN};
    const CliOpt s[SAMPLE_ARG_SPECS] = {
        CLI_DOUBLE("temperature", 0, &a->temperature, "T", "sample at this temperature (0..2; default greedy, exact)"),
        CLI_DOUBLE("top-p", 0, &a->top_p, "P", "keep the most probable tokens holding this much mass (0..1)"),
        CLI_INT("top-k", 0, &a->top_k, "K", "keep the k most probable tokens (0: all)", 0, 1 << 20),
        CLI_DOUBLE("min-p", 0, &a->min_p, "P", "keep tokens at least this fraction as probable as the best (0..1)"),
        CLI_INT("seed", 0, &a->seed, "S", "seed of the sampled choices (default random, printed)", -INT64_MAX, INT64_MAX),
        CLI_DOUBLE("presence-penalty", 0, &a->presence, "X", "subtract this from tokens already generated (-2..2)"),
        CLI_DOUBLE("frequency-penalty", 0, &a->frequency, "X", "subtract this per earlier occurrence (-2..2)"),
    };
    for (int i = 0; i < SAMPLE_ARG_SPECS; i++) opts[i] = s[i];
}

static void in_range(const CliCommand *cmd, const char *name, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi)) cli_usage_error(cmd, "--%s: %g is not in %g..%g", name, v, lo, hi);
}

int sample_args_finish(const CliCommand *cmd, SampleArgs *a, SampleParams *p, FILE *log) {
    *p = (SampleParams)SAMPLE_PARAMS_GREEDY;
    int temperature_given = a->temperature != UNSET;
    if (temperature_given) in_range(cmd, "temperature", a->temperature, 0, 2);
    in_range(cmd, "top-p", a->top_p, 0, 1);
    in_range(cmd, "min-p", a->min_p, 0, 1);
    in_range(cmd, "presence-penalty", a->presence, -2, 2);
    in_range(cmd, "frequency-penalty", a->frequency, -2, 2);
    p->temperature = temperature_given ? a->temperature : 0;
    p->top_p = a->top_p, p->top_k = (int)a->top_k, p->min_p = a->min_p;
    p->presence_penalty = a->presence, p->frequency_penalty = a->frequency;
    if (p->top_p == 0) p->top_p = 1, p->top_k = 1;
    if (!temperature_given && (p->top_p < 1 || p->top_k > 0 || p->min_p > 0)) p->temperature = 1;
    int penalised = p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (p->temperature == 0) {
        if (penalised)
            fprintf(log, "sampling: greedy with penalties %g/%g (deterministic, not the model's exact greedy choice)\n",
                    p->presence_penalty, p->frequency_penalty);
        return penalised;
    }
    if (a->seed != INT64_MIN) p->seed = (uint64_t)a->seed;
    else {
        if (getentropy(&p->seed, sizeof p->seed) != 0) p->seed = (uint64_t)time(NULL);
        p->seed &= INT64_MAX; /* printable, and accepted back by --seed */
    }
    fprintf(log, "sampling: temperature %g, top-p %g, top-k %d, min-p %g, penalties %g/%g, seed %lld (sampled, not exact)\n",
            p->temperature, p->top_p, p->top_k, p->min_p, p->presence_penalty, p->frequency_penalty, (long long)p->seed);
    return 1;
}

const char *sample_params_label(const SampleParams *p) {
    if (p->temperature > 0) return "sampled (seeded, not exact)";
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) return "greedy with penalties (not exact)";
    return "greedy";
}

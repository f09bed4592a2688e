/* sample_args.c - sampling options of run and chat (see sample_args.h). */
#include "cli/sample_args.h"

#include <math.h>
#include <sys/random.h>
#include <time.h>

#include "cli/die.h"
#include "util/err.h"

#define UNSET (-1e300)

void sample_args_specs(SampleArgs *a, ArgSpec *specs) {
    *a = (SampleArgs){UNSET, 1, 0, 0, 0, 0, INT64_MIN};
    ArgSpec s[SAMPLE_ARG_SPECS] = {
        {"temperature", ARG_DOUBLE, &a->temperature, "sample at this temperature (0..2; default greedy, exact)"},
        {"top-p", ARG_DOUBLE, &a->top_p, "keep the most probable tokens holding this much mass (0..1)"},
        {"top-k", ARG_INT, &a->top_k, "keep the k most probable tokens (0: all)"},
        {"min-p", ARG_DOUBLE, &a->min_p, "keep tokens at least this fraction as probable as the best (0..1)"},
        {"seed", ARG_INT, &a->seed, "seed of the sampled choices (default random, printed)"},
        {"presence-penalty", ARG_DOUBLE, &a->presence, "subtract this from tokens already generated (-2..2)"},
        {"frequency-penalty", ARG_DOUBLE, &a->frequency, "subtract this per earlier occurrence (-2..2)"},
    };
    for (int i = 0; i < SAMPLE_ARG_SPECS; i++) specs[i] = s[i];
}

static void in_range(const char *name, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi)) df_die("--%s %g is outside %g..%g", name, v, lo, hi);
}

int sample_args_finish(SampleArgs *a, SampleParams *p, FILE *log) {
    *p = (SampleParams)SAMPLE_PARAMS_GREEDY;
    int temperature_given = a->temperature != UNSET;
    if (temperature_given) in_range("temperature", a->temperature, 0, 2);
    in_range("top-p", a->top_p, 0, 1);
    in_range("min-p", a->min_p, 0, 1);
    in_range("presence-penalty", a->presence, -2, 2);
    in_range("frequency-penalty", a->frequency, -2, 2);
    if (a->top_k < 0 || a->top_k > (1 << 20)) df_die("--top-k %lld is outside 0..1048576", (long long)a->top_k);
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
        if (getrandom(&p->seed, sizeof p->seed, 0) != (ssize_t)sizeof p->seed) p->seed = (uint64_t)time(NULL);
        p->seed &= INT64_MAX; /* printable, and accepted back by --seed */
    }
    fprintf(log, "sampling: temperature %g, top-p %g, top-k %d, min-p %g, penalties %g/%g, seed %lld (sampled, not exact)\n",
            p->temperature, p->top_p, p->top_k, p->min_p, p->presence_penalty, p->frequency_penalty, (long long)p->seed);
    return 1;
}

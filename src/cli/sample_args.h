/* sample_args.h - the sampling options `run` and `chat` share, mapped 1:1 onto the server's
 * request fields: --temperature (llama.cpp's --temp), --top-p, --top-k, --min-p, --seed,
 * --presence-penalty, --frequency-penalty, and llama.cpp's --repeat-penalty with
 * --repeat-last-n. Without them decoding is greedy and exact; with --top-p/--top-k/--min-p
 * alone the temperature is 1 (as in the API); penalties alone stay greedy on the penalised
 * logits (lossy, labelled, deterministic). A sampled run without --seed draws a random seed and
 * prints it, so that the text can be reproduced. */
#ifndef DF_SAMPLE_ARGS_H
#define DF_SAMPLE_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "cli/opts.h"
#include "engine/sampler.h"

#define SAMPLE_ARG_SPECS 9

typedef struct {
    double temperature, top_p, min_p, presence, frequency, repeat;
    int64_t top_k, seed, repeat_last_n;  /* seed INT64_MIN: not given */
} SampleArgs;

/* Sets the defaults and writes the SAMPLE_ARG_SPECS option rows into opts. */
void sample_args_specs(SampleArgs *a, CliOpt *opts);
/* Checks the values (a usage error of cmd naming the option on a bad one) and fills *p. Prints
 * "sampling: ..." (with the seed) to log unless decoding is plain greedy (log NULL: prints
 * nothing, --quiet). Returns 1 when a
 * Sampler is needed (sampling, or penalties), 0 for plain greedy. */
int sample_args_finish(const CliCommand *cmd, SampleArgs *a, SampleParams *p, FILE *log);
/* How p chooses tokens, for the start-up line (a static string). */
const char *sample_params_label(const SampleParams *p);

#endif

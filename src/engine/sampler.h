/* sampler.h - choosing the next token from a row of fp32 logits: greedy (the default, exact) or
 * sampled reproducibly.
 *
 * The logits are processed in one fixed order, single-threaded, so the choice depends only on
 * the logits, the parameters, the seed and the token's position in the completion (never on the
 * thread count, the batch it ran in, speculation or prompt caching):
 *   1. logit_bias is added; presence and frequency penalties (OpenAI's definition) are
 *      subtracted for every token generated so far: z = logit + bias - count * frequency -
 *      (count > 0) * presence; tokens the caller's mask forbids get -inf.
 *   2. temperature 0: the largest z, lowest id on ties (with no bias, penalty or mask this is
 *      exactly model_argmax). Otherwise p = softmax(z / temperature) in double precision.
 *   3. top_k keeps the k most probable (lowest id on ties), top_p the smallest most-probable
 *      prefix of what is left whose mass reaches top_p, min_p the tokens at least min_p times as
 *      probable as the most probable one left.
 *   4. One draw u in [0, 1) from a counter-based generator keyed by (seed, position) selects
 *      from the kept tokens, walked in id order, by cumulative probability.
 * Log-probabilities (when asked for) are of softmax(z), the distribution after step 1 at
 * temperature 1: what the model, constrained and penalised, assigns to each token.
 *
 * A Sampler owns its scratch and penalty counts (allocated at init, nothing on the hot path)
 * and borrows the bias array. One sequence, one thread at a time. */
#ifndef DF_SAMPLER_H
#define DF_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define SAMPLE_MAX_TOP_LOGPROBS 20
#define SAMPLE_MAX_BIAS 300

typedef struct {
    int token;
    float bias;          /* -100..100 */
} LogitBias;

typedef struct {
    double temperature;  /* 0: greedy; else 0 < t <= 2 */
    double top_p;        /* (0, 1]; 1: off */
    int top_k;           /* 0: off */
    double min_p;        /* 0..1; 0: off (1: only the most probable tokens) */
    double presence_penalty, frequency_penalty; /* -2..2 */
    uint64_t seed;
    int logprobs;        /* 1: report the chosen token's log-probability */
    int top_logprobs;    /* 0..SAMPLE_MAX_TOP_LOGPROBS alternatives per token (needs logprobs) */
    const LogitBias *bias; /* borrowed; n_bias entries, ids checked by sampler_init */
    int n_bias;
} SampleParams;

/* Greedy, no penalties, no log-probabilities: what every command does by default. */
#define SAMPLE_PARAMS_GREEDY {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0}

typedef struct {
    int token;
    float logprob;
} TokenLogprob;

/* What one pick reports besides the token (when logprobs were asked for). */
typedef struct {
    float logprob;       /* of the chosen token */
    int n_top;
    TokenLogprob top[SAMPLE_MAX_TOP_LOGPROBS]; /* most probable first, lowest id on ties */
} SampleInfo;

typedef struct {
    SampleParams p;
    int vocab;
    int plain;           /* greedy with nothing to apply: the argmax of the raw logits */
    uint32_t *counts;    /* [vocab] generated so far (only with a penalty) */
    float *z;            /* [vocab] processed logits */
    double *prob;        /* [vocab] probabilities of the tokens still kept */
    int *order;          /* [vocab] candidate ids while truncating */
} Sampler;

/* The one rule for the parameters' values, which the server's requests and the CLI's options
 * are checked with: temperature 0..2, top_p (0, 1], top_k >= 0, min_p 0..1, penalties -2..2,
 * top_logprobs 0..SAMPLE_MAX_TOP_LOGPROBS, at most SAMPLE_MAX_BIAS biases in -100..100 (their
 * ids are checked against the vocabulary by sampler_init). Returns 0, or -1 with *field the
 * parameter's name ("min_p") and a message that says what is wrong with its value. */
int sampler_check(const SampleParams *p, const char **field);

/* Checks the parameters (sampler_check, bias ids < vocab) and allocates. Returns 0, or -1 with a
 * message naming the parameter. */
int sampler_init(Sampler *s, const SampleParams *p, int vocab);
void sampler_free(Sampler *s);
/* Forgets the tokens counted for penalties (a new completion). */
void sampler_restart(Sampler *s);

/* The token for completion position `position` (0 for the first generated token). allow: NULL,
 * or a bitset of vocab bits (bit t of allow[t / 64], the layout of the output constraints'
 * masks) of the tokens permitted there. info may
 * be NULL. Returns the token, or -1 with a message when nothing is permitted or the logits are
 * not finite. Does not count the token: call sampler_accept with the token actually emitted. */
int sampler_pick(Sampler *s, const float *logits, const uint64_t *allow, uint64_t position, SampleInfo *info);
/* Counts an emitted token for the penalties. */
void sampler_accept(Sampler *s, int token);

/* The uniform draw in [0, 1) for (seed, position): 53 bits of a counter-based hash. */
double sampler_uniform(uint64_t seed, uint64_t position);

#endif

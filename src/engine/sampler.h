/* sampler.h - choosing the next token from a row of fp32 logits: greedy (the default, exact) or
 * sampled reproducibly.
 *
 * The logits are processed in one fixed order, single-threaded, so the choice depends only on
 * the logits, the parameters, the seed and the token's position in the completion (never on the
 * thread count, the batch it ran in, speculation or prompt caching):
 *   1. logit_bias is added; then llama.cpp's repetition penalty (repeat_penalty r over the last
 *      repeat_last_n tokens of the context, prompt included: sampler_context) divides the
 *      positive z of every token in that window by r and multiplies the others by r; then
 *      presence and frequency penalties (OpenAI's definition) are subtracted for every token
 *      generated so far: z -= count * frequency + (count > 0) * presence; tokens the caller's
 *      mask forbids get -inf.
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
#define SAMPLE_MAX_REPEAT_PENALTY 10
#define SAMPLE_MAX_REPEAT_LAST_N (1 << 20)

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
    double repeat_penalty; /* llama.cpp's: 0 or 1 off, else 0 < r <= SAMPLE_MAX_REPEAT_PENALTY (lossy) */
    int repeat_last_n;     /* the window of the repetition penalty in tokens (-1: every token so far;
                            * 0 turns it off; llama.cpp's default is 64) */
} SampleParams;

/* Greedy, no penalties, no log-probabilities: what every command does by default. */
#define SAMPLE_PARAMS_GREEDY {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0}

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
    uint32_t *counts;    /* [vocab] generated so far (only with a penalty; also with the repetition
                          * penalty, so that callers that do not draft after penalised choices see
                          * one) */
    uint32_t *in_window; /* [vocab] occurrences in the repetition window (repeat penalty only) */
    int32_t *window;     /* the window's tokens, a ring of repeat_last_n (NULL: -1, unbounded) */
    size_t window_at, window_n;
    float *z;            /* [vocab] processed logits */
    double *prob;        /* [vocab] probabilities of the tokens still kept */
    int *order;          /* [vocab] candidate ids while truncating */
} Sampler;

/* The one rule for the parameters' values, which the server's requests and the CLI's options
 * are checked with: temperature 0..2, top_p (0, 1], top_k >= 0, min_p 0..1, penalties -2..2,
 * repeat_penalty 0..SAMPLE_MAX_REPEAT_PENALTY, repeat_last_n -1..SAMPLE_MAX_REPEAT_LAST_N,
 * top_logprobs 0..SAMPLE_MAX_TOP_LOGPROBS, at most SAMPLE_MAX_BIAS biases in -100..100 (their
 * ids are checked against the vocabulary by sampler_init). Returns 0, or -1 with *field the
 * parameter's name ("min_p") and a message that says what is wrong with its value. */
int sampler_check(const SampleParams *p, const char **field);

/* 1 when p has a repetition penalty in effect. */
int sampler_repeats(const SampleParams *p);
/* Checks the parameters (sampler_check, bias ids < vocab) and allocates. Returns 0, or -1 with a
 * message naming the parameter. */
int sampler_init(Sampler *s, const SampleParams *p, int vocab);
void sampler_free(Sampler *s);
/* Forgets the tokens counted for presence and frequency penalties (a new completion). */
void sampler_restart(Sampler *s);
/* The context before the next generated token (the prompt, or a chat's whole conversation):
 * the repetition window becomes its last repeat_last_n tokens (ids outside the vocabulary are
 * skipped). Nothing to do without a repetition penalty. */
void sampler_context(Sampler *s, const int32_t *ids, size_t n);

/* The token for completion position `position` (0 for the first generated token). allow: NULL,
 * or a bitset of vocab bits (bit t of allow[t / 64], the layout of the output constraints'
 * masks) of the tokens permitted there. info may
 * be NULL. Returns the token, or -1 with a message when nothing is permitted or the logits are
 * not finite. Does not count the token: call sampler_accept with the token actually emitted. */
int sampler_pick(Sampler *s, const float *logits, const uint64_t *allow, uint64_t position, SampleInfo *info);
/* Counts an emitted token for the penalties (and moves the repetition window on). */
void sampler_accept(Sampler *s, int token);

/* The uniform draw in [0, 1) for (seed, position): 53 bits of a counter-based hash. */
double sampler_uniform(uint64_t seed, uint64_t position);

#endif

/* generate.h - greedy generation with Ctrl-C handling, shared by run (and later chat/serve).
 *
 * The first SIGINT asks the loop to stop after the current token (the text so far is kept); a
 * second one exits the process at once. */
#ifndef DF_GENERATE_H
#define DF_GENERATE_H

#include <jansson.h>

#include "cli/engine.h"
#include "cli/spec.h"

/* Called with each generated token; return nonzero to stop. */
typedef int (*TokenFn)(void *ctx, int token);

typedef struct {
    int max_new;       /* stop after this many tokens */
    int stop_token;    /* stop (without emitting) at this id; -1 for none */
    int chunk;         /* prefill chunk */
    DraftFn draft;     /* NULL: n-gram drafts from the text so far */
    void *draft_ctx;
} GenOptions;

typedef struct {
    int prompt_tokens, generated;
    double prefill_s, decode_s;
    int interrupted, hit_stop, hit_context;
    Spec spec;         /* speculation's counts (K3_SPEC) */
    ModelStats at_decode;    /* the model's totals when the prefill ended: what decode added is the rest */
    StreamCounters io_at_decode; /* the streaming store's totals then (zero when mapped) */
} GenResult;

void generate_install_sigint(void);
int generate_interrupted(void);
/* Prefills prompt into st (continuing its state) and decodes greedily, speculating with n-gram
 * drafts unless K3_SPEC=0: the tokens, and the state left behind, are the same either way. */
int generate(Engine *e, State *st, const int *prompt, int n_prompt, const GenOptions *opt, TokenFn fn, void *ctx,
             GenResult *res);
/* --stats: tokens/s, s/token and the per-phase breakdown. */
void generate_print_stats(const Engine *e, const GenResult *r, FILE *f);
/* run --stats-json: the same numbers as one JSON object (new reference), with the generated ids
 * tokens[0..r->generated), the settings that decide the numerics, and what the store read. */
json_t *generate_stats_json(Engine *e, const GenResult *r, const int *tokens);

#endif

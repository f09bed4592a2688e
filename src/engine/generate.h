/* generate.h - a prompt and its continuation (greedy, or sampled) through a Session: what `run` prints and
 * `bench` measures (each bench child is a `run`), on the same decode step as chat and the server.
 *
 * The emission checks run token by token whatever speculation did: cancel (before a token),
 * the stop token (not emitted), the callback, max_new, and the context limit (the token whose
 * position would not fit is emitted, then generation ends). */
#ifndef DF_GENERATE_H
#define DF_GENERATE_H

#include "engine/session.h"

/* Called with each generated token; return nonzero to stop. */
typedef int (*TokenFn)(void *ctx, int token);

typedef struct {
    int max_new;       /* stop after this many tokens */
    int stop_token;    /* stop (without emitting) at this id; -1 for none */
    CancelFn cancel;   /* polled between prefill chunks and before each token; NULL: never */
    void *cancel_ctx;
    Sampler *sampler;  /* NULL: greedy; else its choice at each position (drafts verified with it) */
} GenOptions;

typedef struct {
    int prompt_tokens, generated;
    double prefill_s, decode_s;
    int interrupted, hit_stop, hit_context;
    Spec spec;         /* speculation's counts (K3_SPEC) */
    ModelStats at_decode;    /* the model's totals when the prefill ended: what decode added is the rest */
    EngineReads io_at_decode; /* the streaming store's totals then (zero when mapped) */
} GenResult;

/* Prefills prompt into the session (continuing what it holds when the prompt extends it) and
 * decodes (greedily, or with opt->sampler) with the session's speculation. Afterwards the
 * session's State holds exactly the prompt and every token picked except the last one
 * (session_settle): all emitted tokens when the stop token ended the generation (the stop token
 * is not fed), all but the last emitted one otherwise, as plain decoding would leave it. Returns
 * 0 (also when cancelled: res->interrupted), or -1 with a message. */
int generate(Session *s, const int32_t *prompt, size_t n_prompt, const GenOptions *opt, TokenFn fn, void *ctx,
             GenResult *res);

#endif

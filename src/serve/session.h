/* session.h - a decode State that remembers which tokens it holds, so that a prompt extending
 * them (the next turn of a conversation, a repeated system prompt) only feeds its new suffix.
 *
 * Generation is lazy: session_next picks the greedy token from the last logits and feeds the
 * previously picked one first, so the token that ends a reply (a stop token, the last allowed
 * token, a cancelled step) is never fed and the held tokens stay exactly what the State saw.
 * Feeding a picked token may verify an n-gram draft after it (K3_SPEC, cli/spec.h): the
 * accepted draft tokens are then already in the State, uncommitted, and the next picks come
 * from their rows without a forward. Before anything else is fed the State is cut back to the
 * tokens actually handed out (state_commit), so the held tokens and the State always agree and
 * the tokens are the same as with K3_SPEC=0.
 * A Session owns its State, logits and held-token list; it borrows the Engine, which must
 * outlive it. One thread at a time. */
#ifndef DF_SESSION_H
#define DF_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "cli/engine.h"
#include "cli/spec.h"
#include "text/tokids.h"

/* Polled between prefill chunks and before each decode step; nonzero cancels. */
typedef int (*CancelFn)(void *ctx);

typedef struct {
    Engine *e;
    State *st;
    TokIds held;     /* tokens the State holds (committed), in order */
    float *rows;     /* [MODEL_MAX_VERIFY][vocab] logits of the last forward's rows */
    int ready, at;   /* rows [0, ready) hold predictions; the next pick comes from row at */
    int have_logits;
    int pending;     /* picked but not yet fed, or -1 */
    Spec spec;
    double prefill_s, decode_s;
} Session;

/* Fails only on a bad K3_SPEC (nothing to free then). */
int session_init(Session *s, Engine *e);
void session_free(Session *s);
void session_reset(Session *s);

/* Starts a reply to prompt[0..n): keeps the held tokens when they are a strict prefix of the
 * prompt, otherwise resets, then feeds the rest. *reused (may be NULL) gets the number of
 * prompt tokens that were already held. Returns 0, 1 when cancelled (the session is reset), or
 * -1 with a message (the prompt does not fit the context, or the forward failed; reset). */
int session_prefill(Session *s, const int32_t *prompt, size_t n, CancelFn cancel, void *ctx, size_t *reused);

/* The next greedy token. Returns 0 with *tok set, 1 when the context is full (nothing picked),
 * 2 when cancelled, or -1 with a message (the session is reset). */
int session_next(Session *s, int *tok, CancelFn cancel, void *ctx);

/* Feeds the picked-but-unfed token now (before appending more prompt text). Returns 0 or -1. */
int session_commit(Session *s);

/* The token picked last and not fed, or -1. */
static inline int session_pending(const Session *s) { return s->pending; }

#endif

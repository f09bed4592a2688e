/* session.h - one sequence being decoded: a State that remembers which tokens it holds, and the
 * one greedy decode step that every front end uses (run and bench through generate.h, chat, the
 * server). A prompt that extends the held tokens (the next turn of a conversation, a repeated
 * system prompt) only feeds its new suffix.
 *
 * Generation is lazy: session_next picks a token from the last logits (greedy, or through the
 * caller's Sampler, engine/sampler.h) and feeds the
 * previously picked one first, so the token that ends a reply (a stop token, the last allowed
 * token, a cancelled step) is never fed and the held tokens stay exactly what the State saw.
 * Feeding a picked token may verify an n-gram draft after it (K3_SPEC, spec.h): the accepted
 * draft tokens are then already in the State, uncommitted, and the next picks come from their
 * rows without a forward. Before anything else is fed the State is cut back to the tokens
 * actually handed out (state_commit), so the held tokens and the State always agree and the
 * tokens are the same as with K3_SPEC=0.
 *
 * Prompt-boundary snapshot (K3_PROMPT_SNAPSHOT, on in the server): after each prompt is fed the
 * State is copied aside with the prompt's tokens. A client that resends a conversation without
 * the reasoning it was given (OpenAI clients send back `content` only) diverges from the held
 * tokens right after the previous prompt, so the next prompt restores the snapshot and feeds
 * only what follows it. Costs: one State copy (memory bandwidth) per prompt, one more when the
 * snapshot is restored, and a second State's memory (planned by the caller: EngineOptions.extra_states).
 *
 * A Session owns its States, logits and token lists; it borrows the Engine, which must outlive
 * it. Several Sessions may share an Engine; one thread at a time uses a Session, and one forward
 * at a time runs on the Engine. */
#ifndef DF_SESSION_H
#define DF_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/spec.h"
#include "text/tokids.h"

typedef struct {
    Engine *e;
    State *st;
    TokIds held;     /* tokens the State holds (committed), in order */
    State *snap;     /* the State at the end of the last prompt fed, or NULL when not kept */
    TokIds snap_held; /* the tokens snap holds (none: no snapshot yet) */
    float *rows;     /* [MODEL_MAX_VERIFY][vocab] logits of the last forward's rows */
    int ready, at;   /* rows [0, ready) hold predictions; the next pick comes from row at */
    int have_logits;
    int pending;     /* picked but not yet fed, or -1 */
    int chunk;       /* prefill positions per forward (0: the prefill window, unless the caller changes it) */
    Sampler *sampler; /* what picked the pending token (NULL: greedy), borrowed until the next pick */
    uint64_t pending_pos; /* the pending token's position in its completion */
    Spec spec;
    double prefill_s, decode_s;
    size_t reading;  /* while session_prefill feeds: the held tokens plus the chunk in progress's
                      * finished layers pro rata (what a progress display shows) */
} Session;

/* An empty session that speculates when the engine's options say so (K3_SPEC). */
void session_init(Session *s, Engine *e);
/* What a Session of a model of config c allocates at most besides its States (model_memory):
 * its logits rows and its token lists at a full context of `context` positions (with the
 * snapshot's list when snapshot). */
uint64_t session_bytes(const K3Config *c, int context, int snapshot);
void session_free(Session *s);
void session_reset(Session *s);

/* Keeps a prompt-boundary snapshot from now on (allocates the second State). */
void session_keep_snapshots(Session *s);

/* Starts a reply to prompt[0..n): continues from whichever of the held tokens and the snapshot
 * is the longer strict prefix of the prompt (restoring the snapshot when it wins), otherwise
 * resets, then feeds the rest and snapshots the end of the prompt. cancel is polled before each
 * chunk and between a chunk's layers, with s->reading updated first, so a caller's poll can show
 * the progress of a long window (engine_feed: a cancel between layers undoes that chunk on the
 * CPU device). *reused (may be NULL) gets the number of prompt tokens that were not fed again.
 * Returns 0, 1 when cancelled (the State keeps the chunks that completed and held is that
 * prefix of the prompt; the short chunk
 * goes first, so the fed chunks never reach into the prompt's last `chunk` tokens; nothing is
 * picked; the snapshot is kept), or -1 with a message (the prompt does not fit the context, or
 * the forward failed; reset). */
int session_prefill(Session *s, const int32_t *prompt, size_t n, CancelFn cancel, void *ctx, size_t *reused);

/* The next token, for position `position` of the completion: sm's choice (greedy when NULL)
 * from the last logits; info (may be NULL) gets its log-probabilities (sampler.h). Drafts are
 * verified with the same choice, so speculation never changes the tokens; with penalties (a
 * choice that depends on the tokens before it) nothing is drafted. more: the most tokens the
 * caller may still take after this one (drafts longer than that would be verified for
 * nothing), or -1 for no limit. Returns 0 with *tok set, 1 when the context is full (nothing
 * picked), 2 when cancelled, or -1 with a message (the session is reset). */
int session_next(Session *s, Sampler *sm, uint64_t position, int *tok, SampleInfo *info, int more, CancelFn cancel,
                 void *ctx);

/* --- for a scheduler that feeds several Sessions in one pass (engine/scheduler.h) --- */

/* Prompt tokens the Session (or its snapshot) already holds: what session_begin_prompt keeps. */
size_t session_reusable(const Session *s, const int32_t *prompt, size_t n);
/* session_prefill's first half: keeps the longest reusable prefix (*reused tokens) and drops
 * any pending pick; the caller then feeds prompt[*reused..n) itself, recording each pass with
 * session_batch_fed, and calls session_end_prompt. Returns 0, or -1 with a message (too long). */
int session_begin_prompt(Session *s, const int32_t *prompt, size_t n, size_t *reused);
/* The whole prompt is fed: keeps the prompt-boundary snapshot (when kept). Returns 0, or -1
 * with a message (reset). */
int session_end_prompt(Session *s);
/* The token a pass must feed for this Session's next pick (its pending pick, consumed now), or
 * -1 when none is pending or a verify pass already computed the next pick (session_next then
 * needs no forward). */
int session_batch_token(Session *s);
/* A pass fed toks[0..n) to s->st; row: the logits of its last row. */
void session_batch_fed(Session *s, const int32_t *toks, int n, const float *row);
/* Picks the next token from the latest logits (sm NULL: greedy; mask: NULL or the permitted
 * tokens, sampler.h, which needs sm); it becomes the pending pick. Called again before the pick
 * is fed, it replaces it (a constraint refused the token session_next picked): draft rows a
 * verify pass accepted after the old pick are dropped. Returns 0, or -1 with a message (reset). */
int session_pick(Session *s, Sampler *sm, const uint64_t *mask, uint64_t position, int *tok, SampleInfo *info);

/* Feeds the picked-but-unfed token now (before appending more prompt text). Returns 0 or -1. */
int session_commit(Session *s);

/* Cuts the State back to the held tokens (a verify pass may have fed accepted draft tokens that
 * were not handed out yet): afterwards it is bit-identical to a State fed only the held tokens. */
void session_settle(Session *s);

/* A saved session (chat's /save keeps s->held, session_pending and the settled State through
 * state_save) put back: afterwards s holds tokens[0..n) with the State read through get and
 * `pending` picked and not fed (-1: none); the next prompt must continue it (session_prefill
 * feeds at least one token before anything is picked). Returns 0, or -1 with a message (reset). */
int session_restore(Session *s, const int32_t *tokens, size_t n, int pending,
                    int (*get)(void *ctx, void *p, size_t n), void *ctx);

/* The token picked last and not fed, or -1. */
static inline int session_pending(const Session *s) { return s->pending; }

#endif

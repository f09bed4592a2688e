#include "engine/session.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/clock.h"
#include "util/err.h"

void session_init(Session *s, Engine *e) {
    memset(s, 0, sizeof *s);
    spec_init(&s->spec, e->opt.spec);
    s->e = e;
    s->st = state_create(e->model);
    s->rows = df_malloc(sizeof *s->rows * (size_t)e->cat.cfg.vocab * MODEL_MAX_VERIFY);
    s->ready = 1;
    s->pending = -1;
    s->chunk = 0; /* the prefill window */
}

uint64_t session_bytes(const K3Config *c, int context, int snapshot) {
    uint64_t rows = sizeof(float) * (uint64_t)c->vocab * MODEL_MAX_VERIFY;
    /* a TokIds doubles from 64 entries: at most twice what it holds, or 64 */
    uint64_t tokens = sizeof(int32_t) * (uint64_t)(context < 32 ? 64 : 2 * context);
    return sizeof(Session) + rows + tokens * (snapshot ? 2 : 1);
}

void session_free(Session *s) {
    if (s->st) state_destroy(s->st);
    if (s->snap) state_destroy(s->snap);
    tokids_free(&s->held);
    tokids_free(&s->snap_held);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

/* Drops the held tokens and picks, not the State's contents. */
static void forget(Session *s) {
    s->held.n = 0;
    s->have_logits = 0;
    s->pending = -1;
    s->ready = 1, s->at = 0;
}

void session_reset(Session *s) {
    state_reset(s->st);
    forget(s);
}

void session_keep_snapshots(Session *s) {
    if (!s->snap) s->snap = state_create(s->e->model);
}

static void copy_ids(TokIds *dst, const TokIds *src) {
    dst->n = 0;
    tokids_reserve(dst, src->n);
    if (src->n) memcpy(dst->v, src->v, src->n * sizeof *src->v);
    dst->n = src->n;
}

/* Tokens two States were both fed first: their MLA rows there are the same. */
static size_t shared_prefix(const TokIds *a, const TokIds *b) {
    size_t n = a->n < b->n ? a->n : b->n, i = 0;
    while (i < n && a->v[i] == b->v[i]) i++;
    return i;
}

/* How many of the prompt's tokens `have` already covers: all of them when they are a strict
 * prefix of the prompt (at least one token is left to feed, for logits), otherwise none. */
static size_t covered(const TokIds *have, const int32_t *prompt, size_t n) {
    return have->n && have->n < n && !memcmp(have->v, prompt, have->n * sizeof *prompt) ? have->n : 0;
}

/* Makes the State hold the longest reusable prefix of the prompt; sets *len to its length.
 * Returns 0, or -1 with a message (reset). */
static int reuse(Session *s, const int32_t *prompt, size_t n, size_t *len) {
    size_t live = covered(&s->held, prompt, n);
    size_t snap = s->snap ? covered(&s->snap_held, prompt, n) : 0;
    if (snap <= live) {
        if (!live) session_reset(s);
        *len = live;
        return 0;
    }
    size_t same = shared_prefix(&s->held, &s->snap_held); /* before forget() empties held */
    forget(s);
    if (state_copy_from(s->st, s->snap, (int)same)) return session_reset(s), -1;
    copy_ids(&s->held, &s->snap_held);
    *len = snap;
    return 0;
}

/* Cuts the State back to the held tokens after a verify pass (rows past the ones handed out
 * were never part of the text) and moves the current row's logits first. */
static void settle(Session *s) {
    state_commit(s->st, s->at + 1);
    DF_INVARIANT(state_length(s->st) == (int)s->held.n, "the State holds %d positions, the session %zu tokens",
                 state_length(s->st), s->held.n);
    if (s->at > 0) memcpy(s->rows, s->rows + (size_t)s->at * s->e->cat.cfg.vocab, sizeof *s->rows * (size_t)s->e->cat.cfg.vocab);
    s->ready = 1, s->at = 0;
}

void session_settle(Session *s) { settle(s); }

typedef struct {
    Session *s;
    const int32_t *toks;
    size_t base;        /* held tokens when the feed began */
} Feeding;

/* engine_feed's chunk_done: the chunk is in the State, so its tokens are held. */
static int held_chunk(void *ctx, size_t at, int T, const float *rows) {
    Feeding *f = ctx;
    (void)rows;
    for (int i = 0; i < T; i++) tokids_push(&f->s->held, f->toks[at + (size_t)i]);
    DF_INVARIANT(state_length(f->s->st) == (int)f->s->held.n, "after a chunk the State holds %d positions, the session %zu",
                 state_length(f->s->st), f->s->held.n);
    f->s->have_logits = 1;
    return 0;
}

/* engine_feed's progress: between layers, the tokens done so far (the caller's cancel, polled
 * next, may show them). */
static void feeding(void *ctx, size_t done) {
    Feeding *f = ctx;
    f->s->reading = f->base + done;
}

/* Feeds toks[0..n) in chunks, appending them to held as each is done (engine_feed: the short
 * chunk first, so chat keeps what a cancelled prompt fed, up to its generation prompt). */
static int feed(Session *s, const int32_t *toks, size_t n, CancelFn cancel, void *ctx) {
    settle(s);
    Feeding f = {s, toks, s->held.n};
    s->reading = s->held.n;
    FeedOptions o = {.chunk = s->chunk, .rows = s->rows, .cancel = cancel, .cancel_ctx = ctx, .chunk_done = held_chunk, .ctx = &f,
                     .progress = feeding};
    int rc = engine_feed(s->e, s->st, toks, n, &o);
    s->reading = s->held.n;
    return rc;
}

size_t session_reusable(const Session *s, const int32_t *prompt, size_t n) {
    size_t live = covered(&s->held, prompt, n), snap = s->snap ? covered(&s->snap_held, prompt, n) : 0;
    return live > snap ? live : snap;
}

int session_begin_prompt(Session *s, const int32_t *prompt, size_t n, size_t *reused) {
    if (n == 0) return df_fail("the prompt is empty");
    if (n > (size_t)s->e->max_context)
        return df_fail("the prompt's %zu tokens exceed the context limit of %d", n, s->e->max_context);
    s->pending = -1;
    s->sampler = NULL;
    if (reuse(s, prompt, n, reused)) return -1;
    settle(s);
    return 0;
}

int session_end_prompt(Session *s) {
    if (!s->snap) return 0; /* the State was just settled and fed: it holds exactly the prompt */
    if (state_copy_from(s->snap, s->st, (int)shared_prefix(&s->snap_held, &s->held))) return session_reset(s), -1;
    copy_ids(&s->snap_held, &s->held);
    DF_INVARIANT(state_length(s->snap) == (int)s->snap_held.n, "the snapshot holds %d positions for %zu tokens",
                 state_length(s->snap), s->snap_held.n);
    return 0;
}

int session_prefill(Session *s, const int32_t *prompt, size_t n, CancelFn cancel, void *ctx, size_t *reused) {
    double t0 = df_now();
    size_t common;
    if (session_begin_prompt(s, prompt, n, &common)) return -1;
    if (reused) *reused = common;
    int rc = feed(s, prompt + common, n - common, cancel, ctx);
    if (rc == 0) rc = session_end_prompt(s);
    if (rc < 0) session_reset(s);
    if (rc == 0) engine_profile_step(s->e, stderr);
    s->prefill_s += df_now() - t0;
    return rc;
}

/* The choice for one row of logits (position: its token's place in the completion). */
static int choose(Session *s, const float *row, uint64_t position, SampleInfo *info) {
    if (!s->sampler) {
        if (info) info->logprob = 0, info->n_top = 0;
        return model_argmax(s->e->model, row);
    }
    return sampler_pick(s->sampler, row, NULL, position, info);
}

/* The one decode step: feeds tok, the last token handed out, and verifies after it in the same
 * pass a draft of at most `limit` tokens when speculation has one (drafts are checked with the
 * sampler's own choice at each row's position; with penalties, whose choice depends on the
 * tokens before it, nothing is drafted). Afterwards rows[0, ready) predict the tokens after tok
 * and after each accepted draft token (those are in the State, uncommitted, until settle). */
static int decode_step(Session *s, int32_t tok, int limit) {
    const int V = s->e->cat.cfg.vocab;
    int in[MODEL_MAX_VERIFY] = {tok};
    int history_free = !s->sampler || !s->sampler->counts;
    int d = history_free ? spec_draft(&s->spec, s->held.v, (int)s->held.n, limit, in + 1) : 0;
    s->spec.passes++;
    double t0 = df_now();
    if (d == 0) {
        if (model_forward(s->e->model, s->st, in, 1, s->rows, 0)) return -1;
        spec_plain(&s->spec, df_now() - t0);
        s->ready = 1;
    } else {
        if (model_forward_verify(s->e->model, s->st, in, d + 1, s->rows)) return -1;
        int a = 0;
        while (a < d && choose(s, s->rows + (size_t)a * V, s->pending_pos + 1 + (uint64_t)a, NULL) == in[a + 1]) a++;
        spec_record(&s->spec, d, a, df_now() - t0);
        s->ready = a + 1;
    }
    engine_profile_step(s->e, stderr);
    return 0;
}

/* Feeds the pending token: nothing to compute when a verify pass already did (it was the next
 * accepted draft token); else one decode step, its draft limited by `more` and the context. */
static int feed_pending(Session *s, int more) {
    int32_t tok = s->pending;
    s->pending = -1;
    if (s->at + 1 < s->ready) {
        tokids_push(&s->held, tok);
        s->at++;
        return 0;
    }
    settle(s);
    tokids_push(&s->held, tok);
    int room = s->e->max_context - (int)s->held.n;
    return decode_step(s, tok, more >= 0 && more < room ? more : room);
}

/* Feeds the pending token, or fails (resetting) when it does not fit the context. */
static int commit(Session *s, int more) {
    if (s->pending < 0) return 0;
    if ((int)s->held.n >= s->e->max_context) {
        s->pending = -1;
        return df_fail("the context limit of %d is reached", s->e->max_context);
    }
    if (feed_pending(s, more)) {
        session_reset(s);
        return -1;
    }
    return 0;
}

int session_commit(Session *s) { return commit(s, -1); }

int session_batch_token(Session *s) {
    if (s->pending < 0 || s->at + 1 < s->ready) return -1;
    settle(s);
    int tok = s->pending;
    s->pending = -1;
    return tok;
}

void session_batch_fed(Session *s, const int32_t *toks, int n, const float *row) {
    for (int i = 0; i < n; i++) tokids_push(&s->held, toks[i]);
    DF_INVARIANT(state_length(s->st) == (int)s->held.n, "after a batched pass the State holds %d positions, the session %zu",
                 state_length(s->st), s->held.n);
    memcpy(s->rows, row, sizeof *s->rows * (size_t)s->e->cat.cfg.vocab);
    s->ready = 1, s->at = 0;
    s->have_logits = 1;
}

int session_pick(Session *s, Sampler *sm, const uint64_t *mask, uint64_t position, int *tok, SampleInfo *info) {
    if (!s->have_logits) return df_fail("session: nothing was fed before generating");
    if (mask && !sm) return df_fail("session: a mask needs a sampler");
    if (s->pending >= 0) s->ready = s->at + 1; /* a pick made again: rows verified after the old one do not follow it */
    s->sampler = sm;
    const float *row = s->rows + (size_t)s->at * s->e->cat.cfg.vocab;
    *tok = mask ? sampler_pick(sm, row, mask, position, info) : choose(s, row, position, info);
    if (*tok < 0) {
        session_reset(s);
        return -1;
    }
    s->pending = *tok;
    s->pending_pos = position;
    return 0;
}

int session_restore(Session *s, const int32_t *tokens, size_t n, int pending,
                    int (*get)(void *ctx, void *p, size_t n), void *ctx) {
    session_reset(s);
    if (n > (size_t)s->e->max_context) return df_fail("%zu tokens do not fit the context limit of %d", n, s->e->max_context);
    if (state_load(s->st, (int)n, get, ctx)) return -1;
    tokids_reserve(&s->held, n);
    for (size_t i = 0; i < n; i++) tokids_push(&s->held, tokens[i]);
    s->pending = pending;
    return 0;
}

int session_next(Session *s, Sampler *sm, uint64_t position, int *tok, SampleInfo *info, int more, CancelFn cancel,
                 void *ctx) {
    if (cancel && cancel(ctx)) return 2;
    double t0 = df_now();
    if (s->pending >= 0) {
        if ((int)s->held.n >= s->e->max_context) return 1;
        if (commit(s, more)) return -1;
    }
    int rc = session_pick(s, sm, NULL, position, tok, info);
    s->decode_s += df_now() - t0;
    return rc;
}

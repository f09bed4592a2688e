#include "serve/session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int session_init(Session *s, Engine *e) {
    memset(s, 0, sizeof *s);
    if (spec_init(&s->spec)) return -1;
    s->e = e;
    s->st = state_create(e->model);
    s->rows = df_malloc(sizeof *s->rows * (size_t)e->cat.cfg.vocab * MODEL_MAX_VERIFY);
    s->ready = 1;
    s->pending = -1;
    return 0;
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

int session_snapshot_from_env(int *on) {
    const char *v = getenv("K3_PROMPT_SNAPSHOT");
    *on = 1;
    if (!v || !*v) return 0;
    if (strcmp(v, "0") && strcmp(v, "1"))
        return df_fail("K3_PROMPT_SNAPSHOT: '%s' is not 1 (keep the decode state at the end of each prompt) or 0", v);
    *on = v[0] == '1';
    return 0;
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

/* Makes the State hold the longest reusable prefix of the prompt; returns its length. */
static size_t reuse(Session *s, const int32_t *prompt, size_t n) {
    size_t live = covered(&s->held, prompt, n);
    size_t snap = s->snap ? covered(&s->snap_held, prompt, n) : 0;
    if (snap <= live) {
        if (!live) session_reset(s);
        return live;
    }
    size_t same = shared_prefix(&s->held, &s->snap_held); /* before forget() empties held */
    forget(s);
    state_copy_from(s->st, s->snap, (int)same);
    copy_ids(&s->held, &s->snap_held);
    return snap;
}

/* Cuts the State back to the held tokens after a verify pass (rows past the ones handed out
 * were never part of the text) and moves the current row's logits first. */
static void settle(Session *s) {
    state_commit(s->st, s->at + 1);
    if (s->at > 0) memcpy(s->rows, s->rows + (size_t)s->at * s->e->cat.cfg.vocab, sizeof *s->rows * (size_t)s->e->cat.cfg.vocab);
    s->ready = 1, s->at = 0;
}

/* Feeds toks[0..n) in chunks, appending them to held as each is done. The short chunk comes
 * first, so a feed cancelled between chunks has not started on its last MODEL_MAX_CHUNK tokens
 * (chat keeps what a cancelled prompt fed, up to its generation prompt, which is shorter). */
static int feed(Session *s, const int32_t *toks, size_t n, CancelFn cancel, void *ctx) {
    settle(s);
    for (size_t at = 0; at < n;) {
        if (cancel && cancel(ctx)) return 1;
        int T = (n - at) % MODEL_MAX_CHUNK ? (int)((n - at) % MODEL_MAX_CHUNK) : MODEL_MAX_CHUNK;
        int ids[MODEL_MAX_CHUNK];
        for (int i = 0; i < T; i++) ids[i] = toks[at + (size_t)i];
        if (model_forward(s->e->model, s->st, ids, T, s->rows, 0)) return -1;
        for (int i = 0; i < T; i++) tokids_push(&s->held, ids[i]);
        s->have_logits = 1;
        at += (size_t)T;
    }
    return 0;
}

int session_prefill(Session *s, const int32_t *prompt, size_t n, CancelFn cancel, void *ctx, size_t *reused) {
    double t0 = now_s();
    if (n == 0) return df_fail("the prompt is empty");
    if (n > (size_t)s->e->max_context)
        return df_fail("the prompt's %zu tokens exceed the context limit of %d", n, s->e->max_context);
    s->pending = -1;
    size_t common = reuse(s, prompt, n);
    if (reused) *reused = common;
    int rc = feed(s, prompt + common, n - common, cancel, ctx);
    if (rc < 0) session_reset(s);
    else if (rc == 0 && s->snap) { /* the State was just settled and fed: it holds exactly the prompt */
        state_copy_from(s->snap, s->st, (int)shared_prefix(&s->snap_held, &s->held));
        copy_ids(&s->snap_held, &s->held);
    }
    s->prefill_s += now_s() - t0;
    return rc;
}

/* Feeds the pending token: nothing to compute when a verify pass already did (it was the next
 * accepted draft token); else one forward, verifying a draft after it when there is one. */
static int feed_pending(Session *s) {
    int32_t tok = s->pending;
    s->pending = -1;
    if (s->at + 1 < s->ready) {
        tokids_push(&s->held, tok);
        s->at++;
        return 0;
    }
    settle(s);
    tokids_push(&s->held, tok);
    int in[MODEL_MAX_VERIFY] = {tok}, n = (int)s->held.n, V = s->e->cat.cfg.vocab;
    int d = spec_draft(&s->spec, s->held.v, n, s->e->max_context - n, in + 1);
    s->spec.passes++;
    double t0 = now_s();
    if (d == 0) {
        if (model_forward(s->e->model, s->st, in, 1, s->rows, 0)) return -1;
        spec_plain(&s->spec, now_s() - t0);
        return 0;
    }
    if (model_forward_verify(s->e->model, s->st, in, d + 1, s->rows)) return -1;
    int a = 0;
    while (a < d && model_argmax(s->e->model, s->rows + (size_t)a * V) == in[a + 1]) a++;
    spec_record(&s->spec, d, a, now_s() - t0);
    s->ready = a + 1;
    return 0;
}

int session_commit(Session *s) {
    if (s->pending < 0) return 0;
    if ((int)s->held.n >= s->e->max_context) {
        s->pending = -1;
        return df_fail("the context limit of %d is reached", s->e->max_context);
    }
    if (feed_pending(s)) {
        session_reset(s);
        return -1;
    }
    return 0;
}

int session_next(Session *s, int *tok, CancelFn cancel, void *ctx) {
    if (cancel && cancel(ctx)) return 2;
    double t0 = now_s();
    if (s->pending >= 0) {
        if ((int)s->held.n >= s->e->max_context) return 1;
        if (session_commit(s)) return -1;
    }
    if (!s->have_logits) return df_fail("session: nothing was fed before generating");
    *tok = model_argmax(s->e->model, s->rows + (size_t)s->at * s->e->cat.cfg.vocab);
    s->pending = *tok;
    s->decode_s += now_s() - t0;
    return 0;
}

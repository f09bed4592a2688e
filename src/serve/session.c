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

void session_init(Session *s, Engine *e) {
    memset(s, 0, sizeof *s);
    s->e = e;
    s->st = state_create(e->model);
    s->logits = df_malloc(sizeof *s->logits * (size_t)e->cat.cfg.vocab);
    s->pending = -1;
}

void session_free(Session *s) {
    if (s->st) state_destroy(s->st);
    tokids_free(&s->held);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

void session_reset(Session *s) {
    state_reset(s->st);
    s->held.n = 0;
    s->have_logits = 0;
    s->pending = -1;
}

/* Feeds toks[0..n) in chunks, appending them to held. */
static int feed(Session *s, const int32_t *toks, size_t n, CancelFn cancel, void *ctx) {
    for (size_t at = 0; at < n;) {
        if (cancel && cancel(ctx)) return 1;
        int T = n - at < MODEL_MAX_CHUNK ? (int)(n - at) : MODEL_MAX_CHUNK;
        int ids[MODEL_MAX_CHUNK];
        for (int i = 0; i < T; i++) ids[i] = toks[at + (size_t)i];
        if (model_forward(s->e->model, s->st, ids, T, s->logits, 0)) return -1;
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
    size_t common = s->held.n;
    if (common >= n || (common && memcmp(s->held.v, prompt, common * sizeof *prompt) != 0)) {
        session_reset(s);
        common = 0;
    }
    if (reused) *reused = common;
    int rc = feed(s, prompt + common, n - common, cancel, ctx);
    if (rc) session_reset(s);
    s->prefill_s += now_s() - t0;
    return rc;
}

int session_commit(Session *s) {
    if (s->pending < 0) return 0;
    int tok = s->pending;
    s->pending = -1;
    if (state_length(s->st) >= s->e->max_context) return df_fail("the context limit of %d is reached", s->e->max_context);
    int32_t t = tok;
    if (feed(s, &t, 1, NULL, NULL)) {
        session_reset(s);
        return -1;
    }
    return 0;
}

int session_next(Session *s, int *tok, CancelFn cancel, void *ctx) {
    if (cancel && cancel(ctx)) return 2;
    double t0 = now_s();
    if (s->pending >= 0) {
        if (state_length(s->st) >= s->e->max_context) return 1;
        if (session_commit(s)) return -1;
    }
    if (!s->have_logits) return df_fail("session: nothing was fed before generating");
    *tok = model_argmax(s->e->model, s->logits);
    s->pending = *tok;
    s->decode_s += now_s() - t0;
    return 0;
}

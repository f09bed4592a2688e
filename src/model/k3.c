/* k3.c - one chunk of positions through the whole model, top to bottom (docs/MODEL.md 4.1):
 * embed; per layer { AttnRes -> attention (KDA or MLA), AttnRes -> FFN (dense or MoE) }; tail.
 * The storage and kernel details sit behind SpineSource, ExpertSource and the Mat products. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/device.h"
#include "kernels/mat.h"
#include "model/internal.h"
#include "model/ops.h"
#include "util/clock.h"
#include "util/err.h"

int model_context(const K3Config *c, int asked) {
    if (asked < 1) asked = 1;
    return (int64_t)asked > c->max_positions ? (int)c->max_positions : asked;
}

ModelMemory model_memory(const K3Config *c, MlaCacheMode mla, int max_context) {
    int context = model_context(c, max_context);
    ModelMemory mm = {sizeof(Model) + scratch_bytes(c, context), state_bytes(c, mla, context), state_verify_bytes(c)};
    return mm;
}

int model_create(Model **out, const Catalog *cat, SpineSource *spine, ExpertSource *experts, Pool *pool, ALogMode mode,
                 int max_context) {
    Model *m = df_calloc(1, sizeof *m);
    m->cfg = cat->cfg;
    m->cat = cat;
    m->spine = spine;
    m->experts = experts;
    m->pool = pool;
    m->look_layer = -1;
    m->max_context = model_context(&m->cfg, max_context);
    if (weights_bind(&m->w, cat, spine, mode)) {
        free(m);
        return -1;
    }
    scratch_alloc(&m->s, &m->cfg, m->max_context);
    *out = m;
    return 0;
}

void model_destroy(Model *m) {
    if (!m) return;
    model_release_device(m);
    weights_free(&m->w, &m->cfg);
    scratch_free(&m->s, &m->cfg);
    free(m);
}

const K3Config *model_config(const Model *m) { return &m->cfg; }
int model_max_context(const Model *m) { return m->max_context; }
ModelStats *model_stats(Model *m) { return &m->stats; }

/* Each token's embedding row, widened exactly to fp32. */
static void embed(Model *m, const int *tokens, int T) { mat_gather_rows(&m->w.embed, tokens, T, m->s.P); }

/* x[t] = AttnRes over (anchors[0..n), P[t]) with pseudo-query q; with no anchors, x = P. */
static void attn_res(Model *m, int n_anchors, const float *q, int T, float *x) {
    const int H = m->cfg.hidden;
    const float *values[K3_MAX_LAYERS + 2];
    for (int t = 0; t < T; t++) {
        for (int a = 0; a < n_anchors; a++) values[a] = m->s.anchors + ((size_t)a * MODEL_MAX_CHUNK + t) * H;
        values[n_anchors] = m->s.P + (size_t)t * H;
        if (n_anchors == 0) memcpy(x + (size_t)t * H, values[0], sizeof(float) * (size_t)H);
        else op_attnres(x + (size_t)t * H, values, n_anchors + 1, q, H, m->cfg.rms_eps);
    }
}

static void rmsnorm_rows(Model *m, float *x, const float *w, int T) {
    const int H = m->cfg.hidden;
    for (int t = 0; t < T; t++) op_rmsnorm(x + (size_t)t * H, x + (size_t)t * H, w, H, m->cfg.rms_eps);
}

static void add_rows(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Attention half of layer l; returns the anchor count after it. */
static int attention_block(Model *m, const Seq *seqs, int n_seqs, int l, int n_anchors, int T) {
    const LayerWeights *L = &m->w.layers[l];
    Scratch *s = &m->s;
    const size_t HT = (size_t)m->cfg.hidden * T;
    double t0 = df_now();
    attn_res(m, n_anchors, L->attn_res_q, T, s->xn);
    int boundary = l % m->cfg.attn_res_block == 0;
    if (boundary) { /* snapshot the finished block's sum as a new anchor; P restarts */
        for (int t = 0; t < T; t++)
            memcpy(s->anchors + ((size_t)n_anchors * MODEL_MAX_CHUNK + t) * m->cfg.hidden, s->P + (size_t)t * m->cfg.hidden,
                   sizeof(float) * (size_t)m->cfg.hidden);
        n_anchors++;
    }
    rmsnorm_rows(m, s->xn, L->attn_norm, T);
    if (L->kind == LAYER_MLA) mla_forward(m, L, l, seqs, n_seqs, s->xn, T, s->attn_out);
    else kda_forward(m, L, l, seqs, n_seqs, s->xn, T, s->attn_out);
    if (boundary) memcpy(s->P, s->attn_out, sizeof(float) * HT);
    else add_rows(s->P, s->attn_out, HT);
    m->stats.attention_s += df_now() - t0;
    return n_anchors;
}

static int ffn_block(Model *m, int l, int n_anchors, int T) {
    const LayerWeights *L = &m->w.layers[l];
    Scratch *s = &m->s;
    double t0 = df_now();
    attn_res(m, n_anchors, L->ffn_res_q, T, s->x);
    rmsnorm_rows(m, s->x, L->ffn_norm, T);
    if (L->moe) {
        if (moe_forward(m, L, l, s->x, T, s->ffn_out)) return -1;
    } else
        mlp_forward(m, &L->dense, m->cfg.dense_inter, s->x, T, s->ffn_out);
    add_rows(s->P, s->ffn_out, (size_t)m->cfg.hidden * T);
    m->stats.ffn_s += df_now() - t0;
    return 0;
}

/* Final AttnRes and norm of every row, then lm_head for the n rows listed in out_rows (one
 * product over the gathered rows); logits: [n][vocab]. */
static int tail(Model *m, int n_anchors, int T, const int *out_rows, int n, float *logits) {
    Scratch *s = &m->s;
    const int H = m->cfg.hidden;
    double t0 = df_now();
    attn_res(m, n_anchors, m->w.out_res_q, T, s->x);
    rmsnorm_rows(m, s->x, m->w.final_norm, T);
    const float *rows = s->x;
    int gather = 0;
    for (int i = 0; i < n; i++) gather |= out_rows[i] != i;
    if (gather) { /* xn is free at the tail */
        for (int i = 0; i < n; i++) memcpy(s->xn + (size_t)i * H, s->x + (size_t)out_rows[i] * H, sizeof(float) * (size_t)H);
        rows = s->xn;
    }
    mat_mul(m->pool, logits, &m->w.lm_head, rows, n);
    m->stats.head_s += df_now() - t0;
    return model_check_logits(m, logits, out_rows, n);
}

int model_check_logits(const Model *m, const float *logits, const int *rows, int n) {
    const int V = m->cfg.vocab;
    for (size_t i = 0; i < (size_t)n * V; i++)
        if (!isfinite(logits[i]))
            return df_fail("non-finite logit at position %d, token %zu: the weights hold NaN/Inf values", rows[i / V],
                           i % V);
    return 0;
}

static int check_tokens(const Model *m, const int *tokens, int T) {
    if (T < 1 || T > MODEL_MAX_CHUNK) return df_fail("forward: chunk of %d positions (1..%d allowed)", T, MODEL_MAX_CHUNK);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->cfg.vocab)
            return df_fail("token id %d is outside the vocabulary (0..%d)", tokens[t], m->cfg.vocab - 1);
    return 0;
}

/* With a streamed spine, layer l's bytes may sit in a different buffer, or be other bytes, on
 * every pass: its Mats (and their residency keys) are asked for again. */
int model_acquire_layer(Model *m, int l) {
    if (!m->spine->acquire_layer) return 0;
    double t0 = df_now();
    int moved = m->spine->acquire_layer(m->spine, l);
    m->stats.spine_wait_s += df_now() - t0;
    if (moved < 0) return -1;
    if (moved && weights_bind_layer_mats(&m->w, m->cat, l, m->spine)) {
        m->spine->release_layer(m->spine, l);
        return -1;
    }
    return 0;
}

int model_enter_layer(Model *m, int l) {
    if (devpass_layer_held(m, l)) return 0; /* its products run on the device's copies */
    return model_acquire_layer(m, l) ? -1 : 1;
}

void model_leave_layer(Model *m, int l, int entered) {
    if (entered > 0 && m->spine->release_layer) m->spine->release_layer(m->spine, l);
}

/* The pass itself: tokens[0..T) split into seqs, every layer, the states advanced. The caller
 * checked the arguments and reserved the states' room. A pass of one sequence goes to the device
 * when it takes it (devpass.c; out_rows are then consecutive: all rows, or the last); otherwise the
 * states' arrays are brought up to date first. */
static int forward_rows(Model *m, const Seq *seqs, int n_seqs, const int *tokens, int T, const int *out_rows, int n_out,
                        float *logits) {
    if (devpass_takes(m, n_seqs, T) && (!m->verifying || devpass_records(m, seqs[0].st)))
        return devpass_forward(m, seqs, n_seqs, tokens, T, out_rows, n_out, logits);
    for (int q = 0; q < n_seqs; q++) {
        if (state_to_host(seqs[q].st)) return -1;
        state_host_changed(seqs[q].st);
        seqs[q].st->dev_verify = 0;
    }
    embed(m, tokens, T);
    m->look_layer = -1;
    m->chunk_pos = seqs[0].st->len; /* trace replay (benchmark only) follows the first sequence */
    int n_anchors = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const int entered = model_enter_layer(m, l);
        if (entered < 0) return -1;
        n_anchors = attention_block(m, seqs, n_seqs, l, n_anchors, T);
        int rc = ffn_block(m, l, n_anchors, T);
        model_leave_layer(m, l, entered);
        if (rc) return -1;
    }
    for (int q = 0; q < n_seqs; q++) seqs[q].st->len += seqs[q].rows;
    m->stats.positions += (uint64_t)T;
    m->stats.forwards++;
    int rc = logits ? tail(m, n_anchors, T, out_rows, n_out, logits) : 0;
    const char *fault = device_fault(); /* a device that failed computed zeros: the forward fails */
    return fault ? df_fail("%s", fault) : rc;
}

int model_forward(Model *m, State *st, const int *tokens, int T, float *logits, int all_rows) {
    if (check_tokens(m, tokens, T) || state_reserve(st, st->len + T)) return -1;
    st->verify_rows = 0;
    Seq seq = {st, 0, T};
    int rows[MODEL_MAX_CHUNK];
    for (int t = 0; t < T; t++) rows[t] = all_rows ? t : T - 1;
    return forward_rows(m, &seq, 1, tokens, T, rows, all_rows ? T : 1, logits);
}

int model_forward_batch(Model *m, State *const *states, const int *tokens, const int *rows_per_state, int n,
                        float *logits, int all_rows) {
    Seq seqs[MODEL_MAX_CHUNK];
    int out[MODEL_MAX_CHUNK], T = 0, n_out = 0;
    if (n < 1 || n > MODEL_MAX_CHUNK) return df_fail("forward: %d sequences in one pass (1..%d allowed)", n, MODEL_MAX_CHUNK);
    for (int q = 0; q < n; q++) {
        int r = rows_per_state[q];
        if (r < 1 || T + r > MODEL_MAX_CHUNK)
            return df_fail("forward: %d rows for sequence %d (1 or more, %d in all at most)", r, q, MODEL_MAX_CHUNK);
        for (int p = 0; p < q; p++)
            if (states[p] == states[q]) return df_fail("forward: sequence %d is given twice in one pass", q);
        seqs[q] = (Seq){states[q], T, r};
        T += r;
        for (int t = all_rows ? seqs[q].row0 : T - 1; t < T; t++) out[n_out++] = t;
    }
    if (check_tokens(m, tokens, T)) return -1;
    for (int q = 0; q < n; q++)
        if (state_reserve(states[q], states[q]->len + seqs[q].rows)) return -1;
    for (int q = 0; q < n; q++) states[q]->verify_rows = 0;
    return forward_rows(m, seqs, n, tokens, T, out, n_out, logits);
}

int model_forward_verify(Model *m, State *st, const int *tokens, int T, float *logits) {
    if (T > MODEL_MAX_VERIFY) return df_fail("verify: %d rows (at most %d)", T, MODEL_MAX_VERIFY);
    state_prepare_verify(st);
    m->verifying = 1;
    int rc = model_forward(m, st, tokens, T, logits, 1);
    m->verifying = 0;
    if (!rc) st->verify_rows = T;
    return rc;
}

int model_argmax(const Model *m, const float *logits) { return op_argmax(logits, m->cfg.vocab); }

void model_set_mla_cache(Model *m, MlaCacheMode mode) { m->mla_cache = mode; }
MlaCacheMode model_mla_cache(const Model *m) { return m->mla_cache; }

uint64_t model_mla_bytes_per_position(const K3Config *c, MlaCacheMode mode) {
    return state_bytes(c, mode, 1) - state_bytes(c, mode, 0);
}

/* mla.c - gated multi-head latent attention without positional encoding (docs/MODEL.md 4.4),
 * for T new positions appended after `base` cached ones. Heads run as pool tasks.
 *
 * Two cache layouts (model.h, MlaCacheMode). Expanded: the cache holds every head's key and value,
 * exactly what the reference attention reads. Latent: the cache holds c (normalised latent) and
 * k_pe per position, and each head works in latent space: its query is absorbed into kv_b's key
 * rows, q_lat = W_uk[h]^T q_nope, so score_u = q_lat . c_u + q_pe . kpe_u, and its output is
 * W_uv[h] (sum_u p_u c_u). Same weights, 53x less cache to hold and read per position on K3, and
 * no kv_b product for the new positions.
 *
 * A chunk may hold several sequences' rows (Seq): the projections run once over all rows; each
 * sequence appends its rows to its own cache and attends over it, so a row's result is the one
 * its sequence alone would get. */
#include <math.h>
#include <string.h>

#include "kernels/mat.h"
#include "model/internal.h"
#include "model/ops.h"

/* The heads of one sequence: its rows [row0, row0 + T) of the chunk, after base cached positions. */
typedef struct {
    Model *m;
    const MlaWeights *w;
    LayerState *st;
    int base, row0, T;
} MlaTask;

/* Splits the projections of chunk rows [row0, row0 + T) into cached keys and values. */
static void append_kv(const K3Config *c, LayerState *st, const Scratch *s, int base, int row0, int T) {
    const int NH = c->mla_heads, QK = config_mla_qk_dim(c), KVW = c->kv_lora + c->qk_rope;
    for (int t = 0; t < T; t++) {
        const float *kvf = s->kvf + (size_t)(row0 + t) * NH * (c->qk_nope + c->v_head);
        const float *kpe = s->ckv + (size_t)(row0 + t) * KVW + c->kv_lora;
        for (int h = 0; h < NH; h++) {
            float *key = st->keys + ((size_t)(base + t) * NH + h) * QK;
            float *val = st->values + ((size_t)(base + t) * NH + h) * c->v_head;
            const float *src = kvf + (size_t)h * (c->qk_nope + c->v_head);
            memcpy(key, src, sizeof *key * (size_t)c->qk_nope);
            memcpy(key + c->qk_nope, kpe, sizeof *key * (size_t)c->qk_rope);
            memcpy(val, src + c->qk_nope, sizeof *val * (size_t)c->v_head);
        }
    }
}

static void mla_head(void *ctx, int h) {
    MlaTask *a = ctx;
    const K3Config *c = &a->m->cfg;
    Scratch *s = &a->m->s;
    const int NH = c->mla_heads, QK = config_mla_qk_dim(c), V = c->v_head;
    const float scale = 1.0f / sqrtf((float)QK);
    float *score = s->scores + (size_t)h * a->m->max_context;
    for (int t = 0; t < a->T; t++) {
        const size_t row = (size_t)(a->row0 + t);
        const float *q = s->qf + (row * NH + h) * QK;
        int n = a->base + t + 1; /* causal: cached positions and new ones up to t */
        for (int u = 0; u < n; u++) {
            const float *key = a->st->keys + ((size_t)u * NH + h) * QK;
            float dot = 0;
            for (int d = 0; d < QK; d++) dot += q[d] * key[d];
            score[u] = dot * scale;
        }
        op_softmax(score, n);
        float *att = s->att + (row * NH + h) * V;
        for (int j = 0; j < V; j++) att[j] = 0;
        for (int u = 0; u < n; u++) {
            const float *val = a->st->values + ((size_t)u * NH + h) * V;
            for (int j = 0; j < V; j++) att[j] += score[u] * val[j];
        }
        const float *gate = s->g + (row * NH + h) * V;
        for (int j = 0; j < V; j++) att[j] *= op_sigmoid(gate[j]);
    }
}

/* Appends chunk rows [row0, row0 + T)'s normalised latent (in s->cq) and raw k_pe to the latent cache. */
static void append_latent(const K3Config *c, LayerState *st, const Scratch *s, int base, int row0, int T) {
    const int KVW = c->kv_lora + c->qk_rope;
    for (int t = 0; t < T; t++) {
        float *dst = st->latent + (size_t)(base + t) * KVW;
        memcpy(dst, s->cq + (size_t)(row0 + t) * c->kv_lora, sizeof *dst * (size_t)c->kv_lora);
        memcpy(dst + c->kv_lora, s->ckv + (size_t)(row0 + t) * KVW + c->kv_lora, sizeof *dst * (size_t)c->qk_rope);
    }
}

/* Head h of the latent cache, for the sequence's rows: scores of its absorbed query (s->qlat)
 * against the cached latents and k_pe, softmax, and the attended latent into s->lctx. */
static void mla_head_latent(void *ctx, int h) {
    MlaTask *a = ctx;
    const K3Config *c = &a->m->cfg;
    Scratch *s = &a->m->s;
    const int NH = c->mla_heads, QK = config_mla_qk_dim(c), R = c->kv_lora, KVW = R + c->qk_rope;
    const float scale = 1.0f / sqrtf((float)QK);
    float *score = s->scores + (size_t)h * a->m->max_context;
    for (int t = 0; t < a->T; t++) {
        const size_t row = (size_t)(a->row0 + t);
        const float *q = s->qf + (row * NH + h) * QK;
        const float *qlat = s->qlat + (row * NH + h) * R;
        float *lctx = s->lctx + (row * NH + h) * R;
        int n = a->base + t + 1;
        for (int u = 0; u < n; u++) {
            const float *lat = a->st->latent + (size_t)u * KVW;
            score[u] = (op_dot(qlat, lat, R) + op_dot(q + c->qk_nope, lat + R, c->qk_rope)) * scale;
        }
        op_softmax(score, n);
        for (int i = 0; i < R; i++) lctx[i] = 0;
        for (int u = 0; u < n; u++) op_axpy(lctx, score[u], a->st->latent + (size_t)u * KVW, R);
    }
}

/* Latent cache, for the chunk's T rows: each head's query absorbed into kv_b's key rows,
 * q_lat = W_uk[h]^T q_nope (one product over every row and head), each sequence's heads attending
 * over its own latents, and each head's attended latent expanded through kv_b's value rows,
 * att = W_uv[h] lctx (one product again); then the output gate. kv_b's rows are head-major: a
 * head's qk_nope key rows, then its v_head value rows. */
static void mla_latent(Model *m, const MlaWeights *w, int l, const Seq *seqs, int n, int T) {
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    const int NH = c->mla_heads, V = c->v_head, R = c->kv_lora;
    const MatHeads keys = {NH, 0, c->qk_nope + V, c->qk_nope, config_mla_qk_dim(c)};
    const MatHeads values = {NH, c->qk_nope, c->qk_nope + V, V, R};
    mat_tmul_heads(m->pool, s->qlat, &w->kv_b, &keys, s->qf, T);
    for (int q = 0; q < n; q++) { /* the score scratch is per head: one sequence at a time */
        MlaTask task = {m, w, &seqs[q].st->layers[l], seqs[q].st->len, seqs[q].row0, seqs[q].rows};
        pool_run(m->pool, NH, mla_head_latent, &task);
    }
    mat_mul_heads(m->pool, s->att, &w->kv_b, &values, s->lctx, T);
    for (size_t i = 0; i < (size_t)T * NH * V; i++) s->att[i] *= op_sigmoid(s->g[i]);
}

void mla_forward(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n, const float *xn, int T, float *out) {
    const K3Config *c = &m->cfg;
    const MlaWeights *w = &L->mla;
    Scratch *s = &m->s;
    const int KVW = c->kv_lora + c->qk_rope;
    mat_mul(m->pool, s->cq, &w->q_a, xn, T);
    for (int t = 0; t < T; t++) op_rmsnorm(s->cq + (size_t)t * c->q_lora, s->cq + (size_t)t * c->q_lora, w->q_a_norm, c->q_lora, c->rms_eps);
    mat_mul(m->pool, s->qf, &w->q_b, s->cq, T);
    mat_mul(m->pool, s->ckv, &w->kv_a, xn, T);
    for (int t = 0; t < T; t++) /* normalised latent; the trailing k_pe part stays raw */
        op_rmsnorm(s->cq + (size_t)t * c->kv_lora, s->ckv + (size_t)t * KVW, w->kv_a_norm, c->kv_lora, c->rms_eps);
    if (m->mla_cache == MLA_CACHE_EXPANDED) mat_mul(m->pool, s->kvf, &w->kv_b, s->cq, T);
    for (int q = 0; q < n; q++) {
        LayerState *st = &seqs[q].st->layers[l];
        if (m->mla_cache == MLA_CACHE_LATENT) append_latent(c, st, s, seqs[q].st->len, seqs[q].row0, seqs[q].rows);
        else append_kv(c, st, s, seqs[q].st->len, seqs[q].row0, seqs[q].rows);
    }
    mat_mul(m->pool, s->g, &w->g, xn, T);
    if (m->mla_cache == MLA_CACHE_LATENT) mla_latent(m, w, l, seqs, n, T);
    else
        for (int q = 0; q < n; q++) { /* the score scratch is per head: one sequence at a time */
            MlaTask task = {m, w, &seqs[q].st->layers[l], seqs[q].st->len, seqs[q].row0, seqs[q].rows};
            pool_run(m->pool, c->mla_heads, mla_head, &task);
        }
    mat_mul(m->pool, out, &w->o, s->att, T);
}

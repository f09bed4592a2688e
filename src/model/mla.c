/* mla.c - gated multi-head latent attention without positional encoding (k3-model.md 3.4),
 * for T new positions appended after `base` cached ones. The cache holds the expanded keys and
 * values in fp32, exactly what the attention reads. Heads run as pool tasks. */
#include <math.h>
#include <string.h>

#include "kernels/mat.h"
#include "model/internal.h"
#include "model/ops.h"

typedef struct {
    Model *m;
    LayerState *st;
    int base, T;
} MlaTask;

/* Splits the projections of T new positions into cached keys and values. */
static void append_kv(const K3Config *c, LayerState *st, const Scratch *s, int base, int T) {
    const int NH = c->mla_heads, QK = config_mla_qk_dim(c), KVW = c->kv_lora + c->qk_rope;
    for (int t = 0; t < T; t++) {
        const float *kvf = s->kvf + (size_t)t * NH * (c->qk_nope + c->v_head);
        const float *kpe = s->ckv + (size_t)t * KVW + c->kv_lora;
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
        const float *q = s->qf + ((size_t)t * NH + h) * QK;
        int n = a->base + t + 1; /* causal: cached positions and new ones up to t */
        for (int u = 0; u < n; u++) {
            const float *key = a->st->keys + ((size_t)u * NH + h) * QK;
            float dot = 0;
            for (int d = 0; d < QK; d++) dot += q[d] * key[d];
            score[u] = dot * scale;
        }
        op_softmax(score, n);
        float *att = s->att + ((size_t)t * NH + h) * V;
        for (int j = 0; j < V; j++) att[j] = 0;
        for (int u = 0; u < n; u++) {
            const float *val = a->st->values + ((size_t)u * NH + h) * V;
            for (int j = 0; j < V; j++) att[j] += score[u] * val[j];
        }
        const float *gate = s->g + ((size_t)t * NH + h) * V;
        for (int j = 0; j < V; j++) att[j] *= op_sigmoid(gate[j]);
    }
}

void mla_forward(Model *m, const LayerWeights *L, LayerState *st, int base, const float *xn, int T, float *out) {
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
    mat_mul(m->pool, s->kvf, &w->kv_b, s->cq, T);
    append_kv(c, st, s, base, T);
    mat_mul(m->pool, s->g, &w->g, xn, T);
    MlaTask task = {m, st, base, T};
    pool_run(m->pool, c->mla_heads, mla_head, &task);
    mat_mul(m->pool, out, &w->o, s->att, T);
}

#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/schema.h"
#include "model/model.h"
#include "util/err.h"

typedef struct {
    const Catalog *cat;
    SpineSource *src;
    int layer;
    int failed;
} Binder;

static const TensorInfo *lookup(Binder *b, const char *suffix) {
    char name[SCHEMA_NAME_MAX];
    if (b->layer >= 0) schema_layer_name(name, b->layer, suffix);
    else snprintf(name, sizeof name, SCHEMA_PREFIX "%s", suffix);
    const TensorInfo *t = catalog_find(b->cat, name);
    if (!t && !b->failed) b->failed = 1, df_fail("%s: tensor %s is missing", b->cat->dir, name);
    return t;
}

static Mat bind_mat(Binder *b, const char *suffix) {
    const TensorInfo *t = lookup(b, suffix);
    return t ? b->src->mat(b->src, t) : (Mat){0};
}

/* A vector (or any small tensor), expanded to a new fp32 array. */
static float *bind_vec(Binder *b, const char *suffix) {
    Mat m = bind_mat(b, suffix);
    if (!m.data) {
        if (!b->failed) b->failed = 1, df_fail("%s: tensor %s is not readable at load", b->cat->dir, suffix);
        return NULL;
    }
    float *v = df_malloc(sizeof *v * (size_t)m.rows * (size_t)m.cols);
    mat_expand(&m, v);
    return v;
}

/* norm weight (x) projection row: the AttnRes pseudo-query of one use. */
static float *bind_res_query(Binder *b, const char *norm, const char *proj, int dim) {
    float *q = bind_vec(b, norm), *p = bind_vec(b, proj);
    if (q && p)
        for (int i = 0; i < dim; i++) q[i] *= p[i];
    free(p);
    return q;
}

/* Matrices and vectors are bound separately: a streamed spine rebinds only the matrices. */
static void bind_kda_mats(Binder *b, KdaWeights *k) {
    k->q = bind_mat(b, "self_attn.q_proj.weight");
    k->k = bind_mat(b, "self_attn.k_proj.weight");
    k->v = bind_mat(b, "self_attn.v_proj.weight");
    k->g = bind_mat(b, "self_attn.g_proj.weight");
    k->f_a = bind_mat(b, "self_attn.f_a_proj.weight");
    k->f_b = bind_mat(b, "self_attn.f_b_proj.weight");
    k->b = bind_mat(b, "self_attn.b_proj.weight");
    k->o = bind_mat(b, "self_attn.o_proj.weight");
}

static void bind_kda_vecs(Binder *b, KdaWeights *k, const K3Config *c, ALogMode mode) {
    k->conv_q = bind_vec(b, "self_attn.q_conv1d.weight");
    k->conv_k = bind_vec(b, "self_attn.k_conv1d.weight");
    k->conv_v = bind_vec(b, "self_attn.v_conv1d.weight");
    k->dt_bias = bind_vec(b, "self_attn.dt_bias");
    k->o_norm = bind_vec(b, "self_attn.o_norm.weight");
    float *a_log = bind_vec(b, "self_attn.A_log");
    if (!a_log) return;
    /* per head: entries [0, heads); per channel (compat): entries [0, head_dim), which must exist */
    int n = mode == ALOG_PER_HEAD ? c->kda_heads : c->kda_head_dim;
    if (n > c->a_log_len && !b->failed)
        b->failed = 1, df_fail("K3_A_LOG=per-channel needs A_log of at least head_dim = %d entries, the checkpoint has %d",
                               c->kda_head_dim, c->a_log_len);
    k->decay_rate = df_malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n && i < c->a_log_len; i++) k->decay_rate[i] = expf(a_log[i]);
    free(a_log);
}

static void bind_mla_mats(Binder *b, MlaWeights *m) {
    m->q_a = bind_mat(b, "self_attn.q_a_proj.weight");
    m->q_b = bind_mat(b, "self_attn.q_b_proj.weight");
    m->kv_a = bind_mat(b, "self_attn.kv_a_proj_with_mqa.weight");
    m->kv_b = bind_mat(b, "self_attn.kv_b_proj.weight");
    m->g = bind_mat(b, "self_attn.g_proj.weight");
    m->o = bind_mat(b, "self_attn.o_proj.weight");
}

static void bind_mla_vecs(Binder *b, MlaWeights *m) {
    m->q_a_norm = bind_vec(b, "self_attn.q_a_layernorm.weight");
    m->kv_a_norm = bind_vec(b, "self_attn.kv_a_layernorm.weight");
}

static void bind_mlp(Binder *b, MlpWeights *m, const char *prefix) {
    char name[96];
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    m->gate = bind_mat(b, name);
    snprintf(name, sizeof name, "%s.up_proj.weight", prefix);
    m->up = bind_mat(b, name);
    snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
    m->down = bind_mat(b, name);
}

static void bind_moe_mats(Binder *b, MoeWeights *m, const K3Config *c) {
    m->router = bind_mat(b, "block_sparse_moe.gate.weight");
    m->latent_down = bind_mat(b, "block_sparse_moe.routed_expert_down_proj.weight");
    m->latent_up = bind_mat(b, "block_sparse_moe.routed_expert_up_proj.weight");
    if (c->n_shared > 0) bind_mlp(b, &m->shared, "block_sparse_moe.shared_experts");
}

static void bind_moe_vecs(Binder *b, MoeWeights *m) {
    m->score_bias = bind_vec(b, "block_sparse_moe.gate.e_score_correction_bias");
    m->latent_norm = bind_vec(b, "block_sparse_moe.routed_expert_norm.weight");
}

static void bind_layer_mats(Binder *b, LayerWeights *L, const K3Config *c) {
    if (L->kind == LAYER_MLA) bind_mla_mats(b, &L->mla);
    else bind_kda_mats(b, &L->kda);
    if (L->moe) bind_moe_mats(b, &L->moe_w, c);
    else bind_mlp(b, &L->dense, "mlp");
}

static void bind_layer(Binder *b, LayerWeights *L, const K3Config *c, ALogMode mode) {
    L->kind = (AttnKind)c->layer_kind[b->layer];
    L->moe = config_is_moe(c, b->layer);
    L->attn_norm = bind_vec(b, "input_layernorm.weight");
    L->ffn_norm = bind_vec(b, "post_attention_layernorm.weight");
    L->attn_res_q = bind_res_query(b, "self_attention_res_norm.weight", "self_attention_res_proj.weight", c->hidden);
    L->ffn_res_q = bind_res_query(b, "mlp_res_norm.weight", "mlp_res_proj.weight", c->hidden);
    if (L->kind == LAYER_MLA) bind_mla_vecs(b, &L->mla);
    else bind_kda_vecs(b, &L->kda, c, mode);
    if (L->moe) bind_moe_vecs(b, &L->moe_w);
    bind_layer_mats(b, L, c);
}

int weights_bind_layer_mats(Weights *w, const Catalog *cat, int layer, SpineSource *src) {
    Binder b = {cat, src, layer, 0};
    bind_layer_mats(&b, &w->layers[layer], &cat->cfg);
    return b.failed ? -1 : 0;
}

int weights_bind(Weights *w, const Catalog *cat, SpineSource *src, ALogMode mode) {
    const K3Config *c = &cat->cfg;
    memset(w, 0, sizeof *w);
    w->a_log_mode = mode;
    Binder b = {cat, src, -1, 0};
    w->embed = bind_mat(&b, "model.embed_tokens.weight");
    w->final_norm = bind_vec(&b, "model.norm.weight");
    w->out_res_q = bind_res_query(&b, "model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight", c->hidden);
    w->lm_head = bind_mat(&b, "lm_head.weight");
    w->layers = df_calloc((size_t)c->n_layers, sizeof *w->layers);
    for (b.layer = 0; b.layer < c->n_layers && !b.failed; b.layer++) bind_layer(&b, &w->layers[b.layer], c, mode);
    if (b.failed) weights_free(w, c);
    return b.failed ? -1 : 0;
}

static void free_layer(LayerWeights *L) {
    float *owned[] = {L->attn_norm, L->ffn_norm, L->attn_res_q, L->ffn_res_q, L->kda.conv_q, L->kda.conv_k,
                      L->kda.conv_v, L->kda.decay_rate, L->kda.dt_bias, L->kda.o_norm, L->mla.q_a_norm,
                      L->mla.kv_a_norm, L->moe_w.score_bias, L->moe_w.latent_norm};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
}

void weights_free(Weights *w, const K3Config *c) {
    if (w->layers)
        for (int l = 0; l < c->n_layers; l++) free_layer(&w->layers[l]);
    free(w->layers);
    free(w->final_norm);
    free(w->out_res_q);
    memset(w, 0, sizeof *w);
}

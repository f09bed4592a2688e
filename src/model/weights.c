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

/* Tensor `which` of the binder's layer (or of the model, for the model's own tensors). */
static const TensorInfo *lookup(Binder *b, SchemaTensor which) {
    char name[SCHEMA_NAME_MAX];
    schema_tensor_name(name, which, b->layer);
    const TensorInfo *t = catalog_find(b->cat, name);
    if (!t && !b->failed) b->failed = 1, df_fail("%s: tensor %s is missing", b->cat->dir, name);
    return t;
}

static Mat bind_mat(Binder *b, SchemaTensor which) {
    const TensorInfo *t = lookup(b, which);
    return t ? b->src->mat(b->src, t) : (Mat){0};
}

/* A vector (or any small tensor), expanded to a new fp32 array. */
static float *bind_vec(Binder *b, SchemaTensor which) {
    Mat m = bind_mat(b, which);
    if (!m.data) {
        if (!b->failed) {
            char name[SCHEMA_NAME_MAX];
            schema_tensor_name(name, which, b->layer);
            b->failed = 1, df_fail("%s: tensor %s is not readable at load", b->cat->dir, name);
        }
        return NULL;
    }
    float *v = df_malloc(sizeof *v * (size_t)m.rows * (size_t)m.cols);
    mat_expand(&m, v);
    return v;
}

/* norm weight (x) projection row: the AttnRes pseudo-query of one use. */
static float *bind_res_query(Binder *b, SchemaTensor norm, SchemaTensor proj, int dim) {
    float *q = bind_vec(b, norm), *p = bind_vec(b, proj);
    if (q && p)
        for (int i = 0; i < dim; i++) q[i] *= p[i];
    free(p);
    return q;
}

/* Matrices and vectors are bound separately: a streamed spine rebinds only the matrices. */
static void bind_kda_mats(Binder *b, KdaWeights *k) {
    k->q = bind_mat(b, TENSOR_KDA_Q);
    k->k = bind_mat(b, TENSOR_KDA_K);
    k->v = bind_mat(b, TENSOR_KDA_V);
    k->g = bind_mat(b, TENSOR_ATTN_G);
    k->f_a = bind_mat(b, TENSOR_KDA_F_A);
    k->f_b = bind_mat(b, TENSOR_KDA_F_B);
    k->b = bind_mat(b, TENSOR_KDA_B);
    k->o = bind_mat(b, TENSOR_ATTN_O);
}

static void bind_kda_vecs(Binder *b, KdaWeights *k, const K3Config *c, ALogMode mode) {
    k->conv_q = bind_vec(b, TENSOR_KDA_CONV_Q);
    k->conv_k = bind_vec(b, TENSOR_KDA_CONV_K);
    k->conv_v = bind_vec(b, TENSOR_KDA_CONV_V);
    k->dt_bias = bind_vec(b, TENSOR_KDA_DT_BIAS);
    k->o_norm = bind_vec(b, TENSOR_KDA_O_NORM);
    float *a_log = bind_vec(b, TENSOR_KDA_A_LOG);
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
    m->q_a = bind_mat(b, TENSOR_MLA_Q_A);
    m->q_b = bind_mat(b, TENSOR_MLA_Q_B);
    m->kv_a = bind_mat(b, TENSOR_MLA_KV_A);
    m->kv_b = bind_mat(b, TENSOR_MLA_KV_B);
    m->g = bind_mat(b, TENSOR_ATTN_G);
    m->o = bind_mat(b, TENSOR_ATTN_O);
}

static void bind_mla_vecs(Binder *b, MlaWeights *m) {
    m->q_a_norm = bind_vec(b, TENSOR_MLA_Q_A_NORM);
    m->kv_a_norm = bind_vec(b, TENSOR_MLA_KV_A_NORM);
}

static void bind_mlp(Binder *b, MlpWeights *m, SchemaTensor gate, SchemaTensor up, SchemaTensor down) {
    m->gate = bind_mat(b, gate);
    m->up = bind_mat(b, up);
    m->down = bind_mat(b, down);
}

static void bind_moe_mats(Binder *b, MoeWeights *m, const K3Config *c) {
    m->router = bind_mat(b, TENSOR_ROUTER);
    m->latent_down = bind_mat(b, TENSOR_LATENT_DOWN);
    m->latent_up = bind_mat(b, TENSOR_LATENT_UP);
    if (c->n_shared > 0) bind_mlp(b, &m->shared, TENSOR_SHARED_GATE, TENSOR_SHARED_UP, TENSOR_SHARED_DOWN);
}

static void bind_moe_vecs(Binder *b, MoeWeights *m) {
    m->score_bias = bind_vec(b, TENSOR_ROUTER_BIAS);
    m->latent_norm = bind_vec(b, TENSOR_LATENT_NORM);
}

static void bind_layer_mats(Binder *b, LayerWeights *L, const K3Config *c) {
    if (L->kind == LAYER_MLA) bind_mla_mats(b, &L->mla);
    else bind_kda_mats(b, &L->kda);
    if (L->moe) bind_moe_mats(b, &L->moe_w, c);
    else bind_mlp(b, &L->dense, TENSOR_MLP_GATE, TENSOR_MLP_UP, TENSOR_MLP_DOWN);
}

static void bind_layer(Binder *b, LayerWeights *L, const K3Config *c, ALogMode mode) {
    L->kind = (AttnKind)c->layer_kind[b->layer];
    L->moe = config_is_moe(c, b->layer);
    L->attn_norm = bind_vec(b, TENSOR_ATTN_NORM);
    L->ffn_norm = bind_vec(b, TENSOR_FFN_NORM);
    L->attn_res_q = bind_res_query(b, TENSOR_ATTN_RES_NORM, TENSOR_ATTN_RES_PROJ, c->hidden);
    L->ffn_res_q = bind_res_query(b, TENSOR_FFN_RES_NORM, TENSOR_FFN_RES_PROJ, c->hidden);
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
    w->embed = bind_mat(&b, TENSOR_EMBED);
    w->final_norm = bind_vec(&b, TENSOR_FINAL_NORM);
    w->out_res_q = bind_res_query(&b, TENSOR_OUT_RES_NORM, TENSOR_OUT_RES_PROJ, c->hidden);
    w->lm_head = bind_mat(&b, TENSOR_LM_HEAD);
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

#include "format/schema.h"

#include <stdarg.h>
#include <stdio.h>

/* Each tensor's name: after "language_model.model.layers.{layer}." for a layer's, after
 * "language_model." for the model's own. */
static const char *const tensor_suffix[TENSOR_COUNT] = {
    [TENSOR_ATTN_NORM] = "input_layernorm.weight",
    [TENSOR_ATTN_RES_NORM] = "self_attention_res_norm.weight",
    [TENSOR_ATTN_RES_PROJ] = "self_attention_res_proj.weight",
    [TENSOR_FFN_NORM] = "post_attention_layernorm.weight",
    [TENSOR_FFN_RES_NORM] = "mlp_res_norm.weight",
    [TENSOR_FFN_RES_PROJ] = "mlp_res_proj.weight",
    [TENSOR_KDA_Q] = "self_attn.q_proj.weight",
    [TENSOR_KDA_K] = "self_attn.k_proj.weight",
    [TENSOR_KDA_V] = "self_attn.v_proj.weight",
    [TENSOR_KDA_F_A] = "self_attn.f_a_proj.weight",
    [TENSOR_KDA_F_B] = "self_attn.f_b_proj.weight",
    [TENSOR_KDA_B] = "self_attn.b_proj.weight",
    [TENSOR_KDA_CONV_Q] = "self_attn.q_conv1d.weight",
    [TENSOR_KDA_CONV_K] = "self_attn.k_conv1d.weight",
    [TENSOR_KDA_CONV_V] = "self_attn.v_conv1d.weight",
    [TENSOR_KDA_A_LOG] = "self_attn.A_log",
    [TENSOR_KDA_DT_BIAS] = "self_attn.dt_bias",
    [TENSOR_KDA_O_NORM] = "self_attn.o_norm.weight",
    [TENSOR_ATTN_G] = "self_attn.g_proj.weight",
    [TENSOR_ATTN_O] = "self_attn.o_proj.weight",
    [TENSOR_MLA_Q_A] = "self_attn.q_a_proj.weight",
    [TENSOR_MLA_Q_A_NORM] = "self_attn.q_a_layernorm.weight",
    [TENSOR_MLA_Q_B] = "self_attn.q_b_proj.weight",
    [TENSOR_MLA_KV_A] = "self_attn.kv_a_proj_with_mqa.weight",
    [TENSOR_MLA_KV_A_NORM] = "self_attn.kv_a_layernorm.weight",
    [TENSOR_MLA_KV_B] = "self_attn.kv_b_proj.weight",
    [TENSOR_MLP_GATE] = "mlp.gate_proj.weight",
    [TENSOR_MLP_UP] = "mlp.up_proj.weight",
    [TENSOR_MLP_DOWN] = "mlp.down_proj.weight",
    [TENSOR_ROUTER] = "block_sparse_moe.gate.weight",
    [TENSOR_ROUTER_BIAS] = "block_sparse_moe.gate.e_score_correction_bias",
    [TENSOR_LATENT_DOWN] = "block_sparse_moe.routed_expert_down_proj.weight",
    [TENSOR_LATENT_NORM] = "block_sparse_moe.routed_expert_norm.weight",
    [TENSOR_LATENT_UP] = "block_sparse_moe.routed_expert_up_proj.weight",
    [TENSOR_SHARED_GATE] = "block_sparse_moe.shared_experts.gate_proj.weight",
    [TENSOR_SHARED_UP] = "block_sparse_moe.shared_experts.up_proj.weight",
    [TENSOR_SHARED_DOWN] = "block_sparse_moe.shared_experts.down_proj.weight",
    [TENSOR_EMBED] = "model.embed_tokens.weight",
    [TENSOR_FINAL_NORM] = "model.norm.weight",
    [TENSOR_OUT_RES_NORM] = "model.output_attn_res_norm.weight",
    [TENSOR_OUT_RES_PROJ] = "model.output_attn_res_proj.weight",
    [TENSOR_LM_HEAD] = "lm_head.weight",
};

void schema_layer_name(char *buf, int layer, const char *suffix) {
    snprintf(buf, SCHEMA_NAME_MAX, SCHEMA_PREFIX "model.layers.%d.%s", layer, suffix);
}

void schema_tensor_name(char *buf, SchemaTensor t, int layer) {
    if (t >= TENSOR_EMBED) snprintf(buf, SCHEMA_NAME_MAX, SCHEMA_PREFIX "%s", tensor_suffix[t]);
    else schema_layer_name(buf, layer, tensor_suffix[t]);
}

uint64_t schema_nbytes(const SchemaEntry *e) {
    uint64_t n = dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++) n *= (uint64_t)e->shape[i];
    return n;
}

typedef struct {
    SchemaEntry *out;
    int n, layer;
} Builder;

static void add(Builder *b, SchemaTensor t, Dtype dt, TensorRole role, int ndim, ...) {
    SchemaEntry *e = &b->out[b->n++];
    schema_tensor_name(e->name, t, b->layer);
    e->tensor = t;
    e->dtype = dt;
    e->role = role;
    e->ndim = ndim;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) e->shape[i] = va_arg(ap, int);
    va_end(ap);
}

static void add_matrix(Builder *b, SchemaTensor t, int rows, int cols) {
    add(b, t, DT_BF16, ROLE_SPINE, 2, rows, cols);
}

static void add_residual(Builder *b, const K3Config *c) {
    const int H = c->hidden;
    add(b, TENSOR_ATTN_NORM, DT_BF16, ROLE_SMALL, 1, H);
    add(b, TENSOR_ATTN_RES_NORM, DT_BF16, ROLE_SMALL, 1, H);
    add(b, TENSOR_ATTN_RES_PROJ, DT_BF16, ROLE_SMALL, 2, 1, H);
    add(b, TENSOR_FFN_NORM, DT_BF16, ROLE_SMALL, 1, H);
    add(b, TENSOR_FFN_RES_NORM, DT_BF16, ROLE_SMALL, 1, H);
    add(b, TENSOR_FFN_RES_PROJ, DT_BF16, ROLE_SMALL, 2, 1, H);
}

static void add_kda(Builder *b, const K3Config *c) {
    const int H = c->hidden, W = config_kda_width(c), D = c->kda_head_dim;
    add_matrix(b, TENSOR_KDA_Q, W, H);
    add_matrix(b, TENSOR_KDA_K, W, H);
    add_matrix(b, TENSOR_KDA_V, W, H);
    add_matrix(b, TENSOR_ATTN_G, W, H);
    add_matrix(b, TENSOR_KDA_F_A, D, H);
    add_matrix(b, TENSOR_KDA_F_B, W, D);
    add_matrix(b, TENSOR_KDA_B, c->kda_heads, H);
    add_matrix(b, TENSOR_ATTN_O, H, W);
    add(b, TENSOR_KDA_CONV_Q, DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, TENSOR_KDA_CONV_K, DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, TENSOR_KDA_CONV_V, DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, TENSOR_KDA_A_LOG, DT_F32, ROLE_SMALL, 1, c->a_log_len);
    add(b, TENSOR_KDA_DT_BIAS, DT_F32, ROLE_SMALL, 1, W);
    add(b, TENSOR_KDA_O_NORM, DT_F32, ROLE_SMALL, 1, D);
}

static void add_mla(Builder *b, const K3Config *c) {
    const int H = c->hidden, NH = c->mla_heads;
    add_matrix(b, TENSOR_MLA_Q_A, c->q_lora, H);
    add(b, TENSOR_MLA_Q_A_NORM, DT_BF16, ROLE_SMALL, 1, c->q_lora);
    add_matrix(b, TENSOR_MLA_Q_B, NH * config_mla_qk_dim(c), c->q_lora);
    add_matrix(b, TENSOR_MLA_KV_A, c->kv_lora + c->qk_rope, H);
    add(b, TENSOR_MLA_KV_A_NORM, DT_BF16, ROLE_SMALL, 1, c->kv_lora);
    add_matrix(b, TENSOR_MLA_KV_B, NH * (c->qk_nope + c->v_head), c->kv_lora);
    add_matrix(b, TENSOR_ATTN_G, NH * c->v_head, H);
    add_matrix(b, TENSOR_ATTN_O, H, NH * c->v_head);
}

static void add_ffn(Builder *b, const K3Config *c) {
    const int H = c->hidden;
    if (!config_is_moe(c, b->layer)) {
        add_matrix(b, TENSOR_MLP_GATE, c->dense_inter, H);
        add_matrix(b, TENSOR_MLP_UP, c->dense_inter, H);
        add_matrix(b, TENSOR_MLP_DOWN, H, c->dense_inter);
        return;
    }
    add_matrix(b, TENSOR_ROUTER, c->n_experts, H);
    add(b, TENSOR_ROUTER_BIAS, DT_F32, ROLE_SMALL, 1, c->n_experts);
    add_matrix(b, TENSOR_LATENT_DOWN, c->latent, H);
    add(b, TENSOR_LATENT_NORM, DT_BF16, ROLE_SMALL, 1, c->latent);
    add_matrix(b, TENSOR_LATENT_UP, H, c->latent);
    if (c->n_shared > 0) {
        add_matrix(b, TENSOR_SHARED_GATE, c->shared_inter, H);
        add_matrix(b, TENSOR_SHARED_UP, c->shared_inter, H);
        add_matrix(b, TENSOR_SHARED_DOWN, H, c->shared_inter);
    }
}

int schema_layer(const K3Config *c, int layer, SchemaEntry *out) {
    Builder b = {out, 0, layer};
    add_residual(&b, c);
    if (c->layer_kind[layer] == LAYER_MLA) add_mla(&b, c);
    else add_kda(&b, c);
    add_ffn(&b, c);
    return b.n;
}

int schema_globals(const K3Config *c, SchemaEntry *out) {
    Builder b = {out, 0, -1};
    add(&b, TENSOR_EMBED, DT_BF16, ROLE_EMBED, 2, c->vocab, c->hidden);
    add(&b, TENSOR_FINAL_NORM, DT_BF16, ROLE_SMALL, 1, c->hidden);
    add(&b, TENSOR_OUT_RES_NORM, DT_BF16, ROLE_SMALL, 1, c->hidden);
    add(&b, TENSOR_OUT_RES_PROJ, DT_BF16, ROLE_SMALL, 2, 1, c->hidden);
    add(&b, TENSOR_LM_HEAD, DT_BF16, ROLE_SPINE, 2, c->vocab, c->hidden);
    return b.n;
}

void schema_expert(const K3Config *c, int layer, int expert, SchemaEntry out[6]) {
    static const char *const mats[3] = {"w1", "w2", "w3"};
    for (int m = 0; m < 3; m++) {
        int rows = m == 1 ? c->latent : c->moe_inter, cols = m == 1 ? c->moe_inter : c->latent;
        for (int part = 0; part < 2; part++) {
            SchemaEntry *e = &out[2 * m + part];
            char suffix[96];
            snprintf(suffix, sizeof suffix, "block_sparse_moe.experts.%d.%s.%s", expert, mats[m],
                     part ? "weight_scale" : "weight_packed");
            schema_layer_name(e->name, layer, suffix);
            e->tensor = TENSOR_EXPERT;
            e->dtype = DT_U8;
            e->role = ROLE_EXPERT;
            e->ndim = 2;
            e->shape[0] = rows;
            e->shape[1] = part ? cols / 32 : cols / 2;
        }
    }
}

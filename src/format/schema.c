#include "format/schema.h"

#include <stdarg.h>
#include <stdio.h>

void schema_layer_name(char *buf, int layer, const char *suffix) {
    snprintf(buf, SCHEMA_NAME_MAX, SCHEMA_PREFIX "model.layers.%d.%s", layer, suffix);
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

static void add(Builder *b, const char *suffix, Dtype dt, TensorRole role, int ndim, ...) {
    SchemaEntry *e = &b->out[b->n++];
    if (b->layer >= 0) schema_layer_name(e->name, b->layer, suffix);
    else snprintf(e->name, SCHEMA_NAME_MAX, SCHEMA_PREFIX "%s", suffix);
    e->dtype = dt;
    e->role = role;
    e->ndim = ndim;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) e->shape[i] = va_arg(ap, int);
    va_end(ap);
}

static void add_matrix(Builder *b, const char *suffix, int rows, int cols) {
    add(b, suffix, DT_BF16, ROLE_SPINE, 2, rows, cols);
}

static void add_residual(Builder *b, const K3Config *c) {
    const int H = c->hidden;
    add(b, "input_layernorm.weight", DT_BF16, ROLE_SMALL, 1, H);
    add(b, "self_attention_res_norm.weight", DT_BF16, ROLE_SMALL, 1, H);
    add(b, "self_attention_res_proj.weight", DT_BF16, ROLE_SMALL, 2, 1, H);
    add(b, "post_attention_layernorm.weight", DT_BF16, ROLE_SMALL, 1, H);
    add(b, "mlp_res_norm.weight", DT_BF16, ROLE_SMALL, 1, H);
    add(b, "mlp_res_proj.weight", DT_BF16, ROLE_SMALL, 2, 1, H);
}

static void add_kda(Builder *b, const K3Config *c) {
    const int H = c->hidden, W = config_kda_width(c), D = c->kda_head_dim;
    add_matrix(b, "self_attn.q_proj.weight", W, H);
    add_matrix(b, "self_attn.k_proj.weight", W, H);
    add_matrix(b, "self_attn.v_proj.weight", W, H);
    add_matrix(b, "self_attn.g_proj.weight", W, H);
    add_matrix(b, "self_attn.f_a_proj.weight", D, H);
    add_matrix(b, "self_attn.f_b_proj.weight", W, D);
    add_matrix(b, "self_attn.b_proj.weight", c->kda_heads, H);
    add_matrix(b, "self_attn.o_proj.weight", H, W);
    add(b, "self_attn.q_conv1d.weight", DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, "self_attn.k_conv1d.weight", DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, "self_attn.v_conv1d.weight", DT_F32, ROLE_SMALL, 3, W, 1, c->conv_kernel);
    add(b, "self_attn.A_log", DT_F32, ROLE_SMALL, 1, c->a_log_len);
    add(b, "self_attn.dt_bias", DT_F32, ROLE_SMALL, 1, W);
    add(b, "self_attn.o_norm.weight", DT_F32, ROLE_SMALL, 1, D);
}

static void add_mla(Builder *b, const K3Config *c) {
    const int H = c->hidden, NH = c->mla_heads;
    add_matrix(b, "self_attn.q_a_proj.weight", c->q_lora, H);
    add(b, "self_attn.q_a_layernorm.weight", DT_BF16, ROLE_SMALL, 1, c->q_lora);
    add_matrix(b, "self_attn.q_b_proj.weight", NH * config_mla_qk_dim(c), c->q_lora);
    add_matrix(b, "self_attn.kv_a_proj_with_mqa.weight", c->kv_lora + c->qk_rope, H);
    add(b, "self_attn.kv_a_layernorm.weight", DT_BF16, ROLE_SMALL, 1, c->kv_lora);
    add_matrix(b, "self_attn.kv_b_proj.weight", NH * (c->qk_nope + c->v_head), c->kv_lora);
    add_matrix(b, "self_attn.g_proj.weight", NH * c->v_head, H);
    add_matrix(b, "self_attn.o_proj.weight", H, NH * c->v_head);
}

static void add_ffn(Builder *b, const K3Config *c) {
    const int H = c->hidden;
    if (!config_is_moe(c, b->layer)) {
        add_matrix(b, "mlp.gate_proj.weight", c->dense_inter, H);
        add_matrix(b, "mlp.up_proj.weight", c->dense_inter, H);
        add_matrix(b, "mlp.down_proj.weight", H, c->dense_inter);
        return;
    }
    add_matrix(b, "block_sparse_moe.gate.weight", c->n_experts, H);
    add(b, "block_sparse_moe.gate.e_score_correction_bias", DT_F32, ROLE_SMALL, 1, c->n_experts);
    add_matrix(b, "block_sparse_moe.routed_expert_down_proj.weight", c->latent, H);
    add(b, "block_sparse_moe.routed_expert_norm.weight", DT_BF16, ROLE_SMALL, 1, c->latent);
    add_matrix(b, "block_sparse_moe.routed_expert_up_proj.weight", H, c->latent);
    if (c->n_shared > 0) {
        add_matrix(b, "block_sparse_moe.shared_experts.gate_proj.weight", c->shared_inter, H);
        add_matrix(b, "block_sparse_moe.shared_experts.up_proj.weight", c->shared_inter, H);
        add_matrix(b, "block_sparse_moe.shared_experts.down_proj.weight", H, c->shared_inter);
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
    add(&b, "model.embed_tokens.weight", DT_BF16, ROLE_EMBED, 2, c->vocab, c->hidden);
    add(&b, "model.norm.weight", DT_BF16, ROLE_SMALL, 1, c->hidden);
    add(&b, "model.output_attn_res_norm.weight", DT_BF16, ROLE_SMALL, 1, c->hidden);
    add(&b, "model.output_attn_res_proj.weight", DT_BF16, ROLE_SMALL, 2, 1, c->hidden);
    add(&b, "lm_head.weight", DT_BF16, ROLE_SPINE, 2, c->vocab, c->hidden);
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
            e->dtype = DT_U8;
            e->role = ROLE_EXPERT;
            e->ndim = 2;
            e->shape[0] = rows;
            e->shape[1] = part ? cols / 32 : cols / 2;
        }
    }
}

/* config.c - config.json -> K3Config, with every check of docs/MODEL.md section 1, stated
 * as invariants of the architecture rather than as the full-K3 constants. */
#include "format/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "util/fileio.h"

#define CONFIG_MAX_BYTES (16u << 20)

typedef struct {
    const char *label; /* file name for messages */
    const char *scope; /* "", "text_config.", ... */
} Where;

static int field_missing(Where w, const char *key, const char *what) {
    return df_fail("%s: %s%s: %s", w.label, w.scope, key, what);
}

static int get_int(Where w, json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return field_missing(w, key, "missing");
    if (!json_is_integer(v)) return field_missing(w, key, "must be an integer");
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return df_fail("%s: %s%s: %lld is outside [%lld, %lld]", w.label, w.scope, key, (long long)x,
                       (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int get_dim(Where w, json_t *obj, const char *key, int lo, int hi, int *out) {
    int64_t x;
    if (get_int(w, obj, key, lo, hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

static int get_num(Where w, json_t *obj, const char *key, double lo, double hi, float *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return field_missing(w, key, "missing");
    if (!json_is_number(v)) return field_missing(w, key, "must be a number");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return df_fail("%s: %s%s: %g is outside [%g, %g]", w.label, w.scope, key, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int expect_str(Where w, json_t *obj, const char *key, const char *want) {
    json_t *v = json_object_get(obj, key);
    if (!v) return field_missing(w, key, "missing");
    if (!json_is_string(v)) return field_missing(w, key, "must be a string");
    if (strcmp(json_string_value(v), want) != 0)
        return df_fail("%s: %s%s: \"%s\" is not supported (expected \"%s\")", w.label, w.scope, key,
                       json_string_value(v), want);
    return 0;
}

static int expect_bool(Where w, json_t *obj, const char *key, int want) {
    json_t *v = json_object_get(obj, key);
    if (!v) return field_missing(w, key, "missing");
    if (!json_is_boolean(v)) return field_missing(w, key, "must be true or false");
    if (json_is_true(v) != want)
        return df_fail("%s: %s%s: must be %s for this architecture", w.label, w.scope, key,
                       want ? "true" : "false");
    return 0;
}

static int expect_int(Where w, json_t *obj, const char *key, int64_t want) {
    int64_t x;
    if (get_int(w, obj, key, INT64_MIN, INT64_MAX, &x)) return -1;
    if (x != want)
        return df_fail("%s: %s%s: %lld is not supported (expected %lld)", w.label, w.scope, key,
                       (long long)x, (long long)want);
    return 0;
}

static json_t *get_obj(Where w, json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    if (!v) field_missing(w, key, "missing");
    else if (!json_is_object(v)) field_missing(w, key, "must be an object"), v = NULL;
    return v;
}

/* Reads a one-based layer list into kind[] (marking `kind_value`), checking range and duplicates. */
static int read_layer_list(Where w, json_t *lac, const char *key, int n_layers, uint8_t *seen,
                           uint8_t *kind, AttnKind kind_value) {
    json_t *arr = json_object_get(lac, key);
    if (!arr) return field_missing(w, key, "missing");
    if (!json_is_array(arr)) return field_missing(w, key, "must be an array of one-based layer numbers");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > n_layers)
            return df_fail("%s: %s%s[%zu]: not a layer number in 1..%d", w.label, w.scope, key, i, n_layers);
        int l = (int)json_integer_value(v) - 1;
        if (seen[l])
            return df_fail("%s: %s%s: layer %d (one-based) is listed twice across kda_layers/full_attn_layers",
                           w.label, w.scope, key, l + 1);
        seen[l] = 1;
        kind[l] = (uint8_t)kind_value;
    }
    return 0;
}

static int parse_linear_attn(K3Config *c, Where w, json_t *lac) {
    uint8_t seen[K3_MAX_LAYERS] = {0};
    if (get_dim(w, lac, "head_dim", 1, K3_MAX_KDA_HEAD_DIM, &c->kda_head_dim) ||
        get_dim(w, lac, "num_heads", 1, 4096, &c->kda_heads) ||
        get_dim(w, lac, "short_conv_kernel_size", 1, K3_MAX_CONV_KERNEL, &c->conv_kernel) ||
        get_num(w, lac, "gate_lower_bound", -1e4, -1e-6, &c->gate_lower_bound) ||
        expect_bool(w, lac, "use_full_rank_gate", 1) ||
        read_layer_list(w, lac, "kda_layers", c->n_layers, seen, c->layer_kind, LAYER_KDA) ||
        read_layer_list(w, lac, "full_attn_layers", c->n_layers, seen, c->layer_kind, LAYER_MLA))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (!seen[l])
            return df_fail("%s: %skda_layers/full_attn_layers: layer %d (one-based) is in neither list "
                           "(the lists must partition 1..%d)", w.label, w.scope, l + 1, c->n_layers);
        if (c->layer_kind[l] == LAYER_MLA) c->n_mla_layers++;
        else c->n_kda_layers++;
    }
    return 0;
}

static int parse_quant(K3Config *c, Where w, json_t *q) {
    if (expect_str(w, q, "quant_method", "compressed-tensors") ||
        expect_str(w, q, "format", "mxfp4-pack-quantized"))
        return -1;
    Where wg = {w.label, "text_config.quantization_config.config_groups.group_0."};
    json_t *groups = get_obj(w, q, "config_groups");
    json_t *g0 = groups ? get_obj((Where){w.label, "text_config.quantization_config.config_groups."}, groups, "group_0") : NULL;
    json_t *wt = g0 ? get_obj(wg, g0, "weights") : NULL;
    if (!wt) return -1;
    Where ww = {w.label, "text_config.quantization_config.config_groups.group_0.weights."};
    if (expect_int(ww, wt, "num_bits", 4) || expect_str(ww, wt, "type", "float") ||
        expect_str(ww, wt, "strategy", "group") || expect_int(ww, wt, "group_size", 32) ||
        expect_bool(ww, wt, "symmetric", 1))
        return -1;
    c->mx_group = 32;
    return 0;
}

/* The fixed architectural choices the engine implements; anything else is a different model. */
static int check_architecture(Where w, json_t *t) {
    return expect_str(w, t, "hidden_act", "situ") ||
           expect_str(w, t, "moe_router_activation_func", "sigmoid") ||
           expect_str(w, t, "topk_method", "noaux_tc") || expect_bool(w, t, "moe_renormalize", 1) ||
           expect_bool(w, t, "mla_use_nope", 1) || expect_bool(w, t, "mla_use_output_gate", 1) ||
           expect_bool(w, t, "latent_moe_use_norm", 1) || expect_int(w, t, "num_expert_group", 1) ||
           expect_int(w, t, "topk_group", 1) || expect_int(w, t, "moe_layer_freq", 1) ||
           expect_int(w, t, "num_nextn_predict_layers", 0) ||
           expect_bool(w, t, "tie_word_embeddings", 0)
               ? -1 : 0;
}

static int parse_dims(K3Config *c, Where w, json_t *t) {
    if (get_dim(w, t, "vocab_size", 16, 1 << 22, &c->vocab) ||
        get_dim(w, t, "hidden_size", 32, 65536, &c->hidden) ||
        get_dim(w, t, "num_hidden_layers", 1, K3_MAX_LAYERS, &c->n_layers) ||
        get_dim(w, t, "intermediate_size", 1, 1 << 20, &c->dense_inter) ||
        get_dim(w, t, "first_k_dense_replace", 0, c->n_layers, &c->first_dense) ||
        get_dim(w, t, "num_experts", 1, 1 << 16, &c->n_experts) ||
        get_dim(w, t, "num_experts_per_token", 1, K3_MAX_TOP_K, &c->top_k) ||
        get_dim(w, t, "num_shared_experts", 0, K3_MAX_SHARED_EXPERTS, &c->n_shared) ||
        get_dim(w, t, "moe_intermediate_size", 1, 1 << 20, &c->moe_inter) ||
        get_dim(w, t, "routed_expert_hidden_size", 1, 1 << 20, &c->latent) ||
        get_dim(w, t, "num_attention_heads", 1, 4096, &c->mla_heads) ||
        get_dim(w, t, "q_lora_rank", 1, 1 << 20, &c->q_lora) ||
        get_dim(w, t, "kv_lora_rank", 1, 1 << 20, &c->kv_lora) ||
        get_dim(w, t, "qk_nope_head_dim", 1, 4096, &c->qk_nope) ||
        get_dim(w, t, "qk_rope_head_dim", 0, 4096, &c->qk_rope) ||
        get_dim(w, t, "v_head_dim", 1, 4096, &c->v_head) ||
        get_dim(w, t, "attn_res_block_size", 1, K3_MAX_LAYERS, &c->attn_res_block) ||
        get_num(w, t, "activation_situ_beta", 1e-6, 1e6, &c->situ_beta) ||
        get_num(w, t, "activation_situ_linear_beta", 1e-6, 1e6, &c->situ_linear_beta) ||
        get_num(w, t, "rms_norm_eps", 0, 1, &c->rms_eps) ||
        get_num(w, t, "routed_scaling_factor", 0, 1e6, &c->routed_scaling))
        return -1;
    int64_t maxpos;
    if (get_int(w, t, "max_position_embeddings", 1, INT64_C(1) << 40, &maxpos)) return -1;
    c->max_positions = maxpos;
    int64_t nkv;
    if (get_int(w, t, "num_key_value_heads", 1, 4096, &nkv)) return -1;
    if (nkv != c->mla_heads)
        return df_fail("%s: text_config.num_key_value_heads: %lld must equal num_attention_heads (%d): "
                       "MLA has no grouped-query attention", w.label, (long long)nkv, c->mla_heads);
    return 0;
}

/* Cross-field invariants: what the tensors' shapes and the kernels rely on. */
static int check_consistency(K3Config *c, const char *label) {
    if (c->top_k > c->n_experts)
        return df_fail("%s: text_config.num_experts_per_token: %d exceeds num_experts %d", label, c->top_k, c->n_experts);
    if (c->latent % 32 || c->moe_inter % 32)
        return df_fail("%s: text_config.routed_expert_hidden_size (%d) and moe_intermediate_size (%d) must be "
                       "multiples of the MXFP4 group size 32", label, c->latent, c->moe_inter);
    if (c->routed_scaling != 1.0f)
        return df_fail("%s: text_config.routed_scaling_factor: %g is not supported (the routed sum is "
                       "RMS-normalised, the model uses 1.0)", label, (double)c->routed_scaling);
    if (c->n_layers > c->first_dense && c->n_experts < 1)
        return df_fail("%s: text_config.num_experts: MoE layers need experts", label);
    c->shared_inter = c->n_shared * c->moe_inter;
    c->a_log_len = c->kda_heads;
    return 0;
}

static int parse_special_ids(K3Config *c, Where root, json_t *j, json_t *t) {
    Where wt = {root.label, "text_config."};
    int64_t b, e, p, tb, te, tp;
    if (get_int(root, j, "bos_token_id", 0, c->vocab - 1, &b) || get_int(root, j, "eos_token_id", 0, c->vocab - 1, &e) ||
        get_int(root, j, "pad_token_id", 0, c->vocab - 1, &p) || get_int(wt, t, "bos_token_id", 0, c->vocab - 1, &tb) ||
        get_int(wt, t, "eos_token_id", 0, c->vocab - 1, &te) || get_int(wt, t, "pad_token_id", 0, c->vocab - 1, &tp))
        return -1;
    if (b != tb || e != te || p != tp)
        return df_fail("%s: bos/eos/pad_token_id differ between the root and text_config", root.label);
    c->bos_id = (int)b, c->eos_id = (int)e, c->pad_id = (int)p;
    return 0;
}

static int parse_root(K3Config *c, json_t *j, const char *label) {
    Where root = {label, ""}, wt = {label, "text_config."};
    if (!json_is_object(j)) return df_fail("%s: the top level must be a JSON object", label);
    if (expect_str(root, j, "model_type", "kimi_k3") || expect_bool(root, j, "tie_word_embeddings", 0)) return -1;
    json_t *t = get_obj(root, j, "text_config");
    if (!t || expect_str(wt, t, "model_type", "kimi_linear") || check_architecture(wt, t) || parse_dims(c, wt, t) ||
        parse_special_ids(c, root, j, t))
        return -1;
    json_t *lac = get_obj(wt, t, "linear_attn_config");
    if (!lac || parse_linear_attn(c, (Where){label, "text_config.linear_attn_config."}, lac)) return -1;
    json_t *q = get_obj(wt, t, "quantization_config");
    if (!q || parse_quant(c, (Where){label, "text_config.quantization_config."}, q)) return -1;
    return check_consistency(c, label);
}

int config_parse(K3Config *c, const char *text, size_t len, const char *label) {
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) return df_fail("%s: invalid JSON at line %d: %s", label, jerr.line, jerr.text);
    int rc = parse_root(c, j, label);
    json_decref(j);
    return rc;
}

int config_load(K3Config *c, const char *path) {
    char *text;
    size_t len;
    if (file_read_all(path, CONFIG_MAX_BYTES, &text, &len)) return -1;
    int rc = config_parse(c, text, len, path);
    free(text);
    return rc;
}

uint64_t config_expert_bytes(const K3Config *c) {
    uint64_t gate = (uint64_t)c->moe_inter * (c->latent / 2 + c->latent / 32);
    uint64_t down = (uint64_t)c->latent * (c->moe_inter / 2 + c->moe_inter / 32);
    return 2 * gate + down;
}

/* config_json.c - config.json for a synthetic checkpoint, carrying every field of the real K3
 * file that the engine reads or checks (docs/MODEL.md section 1). */
#include <jansson.h>
#include <stdlib.h>

#include "synth/synth.h"
#include "util/err.h"

static json_t *layer_list(const K3Config *c, AttnKind kind) {
    json_t *a = json_array();
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == kind) json_array_append_new(a, json_integer(l + 1));
    return a;
}

static json_t *linear_attn_json(const K3Config *c) {
    return json_pack("{s:i, s:i, s:i, s:b, s:f, s:o, s:o}", "head_dim", c->kda_head_dim, "num_heads", c->kda_heads,
                     "short_conv_kernel_size", c->conv_kernel, "use_full_rank_gate", 1, "gate_lower_bound",
                     (double)c->gate_lower_bound, "kda_layers", layer_list(c, LAYER_KDA), "full_attn_layers",
                     layer_list(c, LAYER_MLA));
}

static json_t *quant_json(void) {
    json_t *weights = json_pack("{s:i, s:s, s:s, s:i, s:b, s:b, s:s, s:s}", "num_bits", 4, "type", "float",
                                "strategy", "group", "group_size", 32, "symmetric", 1, "dynamic", 0, "observer",
                                "minmax", "scale_dtype", "torch.uint8");
    json_t *group0 = json_pack("{s:s, s:o, s:[s]}", "format", "mxfp4-pack-quantized", "weights", weights, "targets", "Linear");
    return json_pack("{s:s, s:s, s:s, s:{s:o}, s:[s]}", "quant_method", "compressed-tensors", "format",
                     "mxfp4-pack-quantized", "quantization_status", "compressed", "config_groups", "group_0", group0,
                     "ignore", "lm_head");
}

static void set_ints(json_t *o, const char *const *keys, const int *vals, int n) {
    for (int i = 0; i < n; i++) json_object_set_new(o, keys[i], json_integer(vals[i]));
}

static json_t *text_config_json(const K3Config *c) {
    json_t *t = json_pack("{s:s, s:s}", "model_type", "kimi_linear", "dtype", "bfloat16");
    const char *const ik[] = {"bos_token_id", "eos_token_id", "pad_token_id", "hidden_size", "intermediate_size",
                              "moe_intermediate_size", "routed_expert_hidden_size", "num_hidden_layers", "num_experts",
                              "num_experts_per_token", "num_shared_experts", "num_attention_heads", "num_key_value_heads",
                              "vocab_size", "attn_res_block_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                              "qk_rope_head_dim", "v_head_dim", "first_k_dense_replace", "moe_layer_freq",
                              "num_expert_group", "topk_group", "num_nextn_predict_layers"};
    const int iv[] = {c->bos_id, c->eos_id, c->pad_id, c->hidden, c->dense_inter, c->moe_inter, c->latent,
                      c->n_layers, c->n_experts, c->top_k, c->n_shared, c->mla_heads, c->mla_heads, c->vocab,
                      c->attn_res_block, c->q_lora, c->kv_lora, c->qk_nope, c->qk_rope, c->v_head, c->first_dense,
                      1, 1, 1, 0};
    set_ints(t, ik, iv, (int)(sizeof iv / sizeof iv[0]));
    json_object_set_new(t, "max_position_embeddings", json_integer((json_int_t)c->max_positions));
    json_object_set_new(t, "hidden_act", json_string("situ"));
    json_object_set_new(t, "activation_situ_beta", json_real(c->situ_beta));
    json_object_set_new(t, "activation_situ_linear_beta", json_real(c->situ_linear_beta));
    json_object_set_new(t, "moe_router_activation_func", json_string("sigmoid"));
    json_object_set_new(t, "topk_method", json_string("noaux_tc"));
    json_object_set_new(t, "routed_scaling_factor", json_real(c->routed_scaling));
    json_object_set_new(t, "rms_norm_eps", json_real(c->rms_eps));
    const char *const bk[] = {"use_grouped_topk", "moe_renormalize", "latent_moe_use_norm", "mla_use_nope",
                              "mla_use_output_gate", "use_cache"};
    for (size_t i = 0; i < sizeof bk / sizeof bk[0]; i++) json_object_set_new(t, bk[i], json_true());
    json_object_set_new(t, "tie_word_embeddings", json_false());
    json_object_set_new(t, "linear_attn_config", linear_attn_json(c));
    json_object_set_new(t, "quantization_config", quant_json());
    return t;
}

char *synth_config_json(const K3Config *c) {
    json_t *root = json_pack("{s:[s], s:s, s:s, s:b, s:i, s:i, s:i, s:o}", "architectures", "KimiK3ForConditionalGeneration",
                             "model_type", "kimi_k3", "dtype", "bfloat16", "tie_word_embeddings", 0, "bos_token_id",
                             c->bos_id, "eos_token_id", c->eos_id, "pad_token_id", c->pad_id, "text_config",
                             text_config_json(c));
    if (!root) return df_fail("out of memory building config.json"), NULL;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(7));
    json_decref(root);
    if (!s) df_fail("out of memory writing config.json");
    return s;
}

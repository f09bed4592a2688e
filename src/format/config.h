/* config.h - the validated model description read from a checkpoint's config.json.
 *
 * Every dimension the engine uses comes from here; nothing about the model is hard-coded. The
 * loader checks types, ranges and the architecture's invariants and fails with a message naming
 * the field ("config.json: text_config.hidden_size: ..."). Full K3 is one point in this space. */
#ifndef DF_CONFIG_H
#define DF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* The largest values of the config fields that size fixed arrays: config_load refuses anything
 * beyond them, and the model and the store size their arrays by them, so the check and the
 * arrays cannot drift apart. */
#define K3_MAX_LAYERS 1024        /* num_hidden_layers: AttnRes values per row (kernels/vecops.c, cpu/) */
#define K3_MAX_KDA_HEAD_DIM 1024  /* linear_attn_config.head_dim: a KDA head's vectors on the stack (kernels/cpu/) */
#define K3_MAX_TOP_K 64           /* num_experts_per_token: routing (kernels/vecops.c), a decode step's experts */
#define K3_MAX_CONV_KERNEL 64     /* linear_attn_config.short_conv_kernel_size */
#define K3_MAX_SHARED_EXPERTS 64  /* num_shared_experts */

typedef enum { LAYER_KDA = 0, LAYER_MLA = 1 } AttnKind;

/* How the [num_heads (+ padding)] A_log vector is indexed in the KDA decay gate. PER_HEAD is the
 * model's definition (docs/MODEL.md 7.1); PER_CHANNEL reproduces the original Deltafin's
 * reading and exists only as an explicit compatibility switch (K3_A_LOG=per-channel). */
typedef enum { ALOG_PER_HEAD = 0, ALOG_PER_CHANNEL = 1 } ALogMode;

typedef struct {
    /* special ids (root and text_config agree) */
    int bos_id, eos_id, pad_id;
    int vocab;                 /* vocab_size */

    int hidden;                /* hidden_size */
    int n_layers;              /* num_hidden_layers */
    int dense_inter;           /* intermediate_size: dense FFN width (layers < first_dense) */
    int first_dense;           /* first_k_dense_replace: layers [0, first_dense) are dense */

    /* MoE */
    int n_experts;             /* num_experts */
    int top_k;                 /* num_experts_per_token */
    int n_shared;              /* num_shared_experts */
    int moe_inter;             /* moe_intermediate_size: routed expert width */
    int latent;                /* routed_expert_hidden_size: latent width of routed experts */
    int shared_inter;          /* n_shared * moe_inter: the fused shared-expert MLP width */
    float routed_scaling;      /* routed_scaling_factor (must be 1.0, see config.c) */

    /* MLA */
    int mla_heads;             /* num_attention_heads */
    int q_lora;                /* q_lora_rank */
    int kv_lora;               /* kv_lora_rank */
    int qk_nope, qk_rope, v_head;

    /* KDA (linear_attn_config) */
    int kda_heads, kda_head_dim;
    int conv_kernel;           /* short_conv_kernel_size */
    float gate_lower_bound;    /* -5 in K3 */
    int a_log_len;             /* stored A_log length, >= kda_heads (learned from the checkpoint) */

    int attn_res_block;        /* attn_res_block_size */
    float situ_beta, situ_linear_beta;
    float rms_eps;
    int64_t max_positions;     /* max_position_embeddings */

    int mx_group;              /* MXFP4 group size along the input axis (32) */

    uint8_t layer_kind[K3_MAX_LAYERS]; /* AttnKind per 0-based layer */
    int n_mla_layers, n_kda_layers;
} K3Config;

/* Parse and validate config.json at `path`. On failure returns -1 with a message naming the file
 * and field. a_log_len is set to kda_heads; the catalog refines it from the tensor's shape. */
int config_load(K3Config *cfg, const char *path);
/* Same, from an in-memory JSON text; `label` names the source in messages. */
int config_parse(K3Config *cfg, const char *json, size_t len, const char *label);

static inline int config_is_moe(const K3Config *c, int layer) { return layer >= c->first_dense; }
static inline int config_kda_width(const K3Config *c) { return c->kda_heads * c->kda_head_dim; }
static inline int config_mla_qk_dim(const K3Config *c) { return c->qk_nope + c->qk_rope; }

/* Bytes of one routed expert's six tensors (w1, w2, w3 packed + scales). */
uint64_t config_expert_bytes(const K3Config *c);

#endif

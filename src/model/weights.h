/* weights.h - one layer's weights as the forward pass reads them.
 *
 * Matrices (the embedding included) are the Mats the spine store hands out, pointing into memory
 * it owns; the small vectors (norm weights, biases, conv taps, A_log) are expanded to fp32 once at
 * load and owned by the Weights. The AttnRes norm and projection vectors are folded into one
 * pseudo-query per use (docs/MODEL.md 4.2). */
#ifndef DF_WEIGHTS_H
#define DF_WEIGHTS_H

#include "format/catalog.h"
#include "kernels/mat.h"

typedef struct {
    Mat q, k, v, g, f_a, f_b, b, o;
    float *conv_q, *conv_k, *conv_v; /* [width][kernel] */
    float *decay_rate;               /* exp(A_log) per head [heads], or per channel in compat mode */
    float *dt_bias;                  /* [width] */
    float *o_norm;                   /* [head_dim] */
} KdaWeights;

typedef struct {
    Mat q_a, q_b, kv_a, kv_b, g, o;
    float *q_a_norm, *kv_a_norm;
} MlaWeights;

typedef struct {
    Mat gate, up, down;              /* dense FFN, or the fused shared experts of a MoE layer */
} MlpWeights;

typedef struct {
    Mat router;
    float *score_bias;               /* e_score_correction_bias [n_experts], selection only */
    Mat latent_down, latent_up;
    float *latent_norm;              /* routed_expert_norm [latent] */
    MlpWeights shared;               /* rows == 0 when the model has no shared experts */
} MoeWeights;

typedef struct {
    AttnKind kind;
    int moe;
    float *attn_norm, *ffn_norm;     /* input_layernorm, post_attention_layernorm */
    float *attn_res_q, *ffn_res_q;   /* folded AttnRes pseudo-queries [hidden] */
    KdaWeights kda;
    MlaWeights mla;
    MlpWeights dense;
    MoeWeights moe_w;
} LayerWeights;

typedef struct {
    Mat embed;                       /* [vocab][hidden], read one row per token (mat_gather_rows) */
    float *final_norm, *out_res_q;
    Mat lm_head;
    LayerWeights *layers;            /* [n_layers] */
    ALogMode a_log_mode;
} Weights;

struct SpineSource;

/* Binds every non-expert tensor of the catalog through src (model.h). Small vectors are copied to
 * fp32. */
int weights_bind(Weights *w, const Catalog *cat, struct SpineSource *src, ALogMode mode);
/* Binds layer `layer`'s matrices (not its vectors) again: a streamed spine may hold the layer in
 * another buffer, or other bytes in the same one, on every pass. */
int weights_bind_layer_mats(Weights *w, const Catalog *cat, int layer, struct SpineSource *src);
void weights_free(Weights *w, const K3Config *c);

#endif

/* weights.h - one layer's weights as the forward pass reads them.
 *
 * Matrices are Mats into memory owned by the spine store; the small vectors (norm weights,
 * biases, conv taps, A_log) are expanded to fp32 once at load and owned by the Weights. The
 * AttnRes norm and projection vectors are folded into one pseudo-query per use (k3-model.md 3.1). */
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
    const uint16_t *embed;           /* [vocab][hidden] BF16 */
    float *final_norm, *out_res_q;
    Mat lm_head;
    LayerWeights *layers;            /* [n_layers] */
    ALogMode a_log_mode;
} Weights;

/* Where tensor bytes come from: returns a pointer to the tensor's bytes, valid for the lifetime
 * of the provider (a streaming provider: see SpineSource in model.h; it may return NULL for the
 * matrices of a layer it does not hold yet, which the model binds before use). */
typedef const void *(*TensorBytesFn)(void *provider, const TensorInfo *t);

/* Another representation of some matrices (the int8 spine): returns 1 and fills *m when it has
 * tensor t, else 0 (the matrix keeps its bytes). */
typedef int (*MatOverrideFn)(void *ctx, const TensorInfo *t, Mat *m);

/* Binds every non-expert tensor of the catalog. Small vectors are copied to fp32. */
int weights_bind(Weights *w, const Catalog *cat, TensorBytesFn bytes, void *provider, ALogMode mode);
/* Rebinds layer `layer`'s matrices (not its vectors) to bytes from a new provider, or to fn's Mat
 * where it has one (fn may be NULL): the spine store may hold a streamed layer in a different
 * buffer on every pass. */
int weights_bind_layer_mats(Weights *w, const Catalog *cat, int layer, TensorBytesFn bytes, void *provider,
                            MatOverrideFn fn, void *ctx);
void weights_free(Weights *w, const K3Config *c);

/* Rebinds every matrix (all layers and lm_head): to fn's Mat where it has one, else to bytes from
 * the provider (the one weights_bind used). Call before any forward. */
int weights_override_mats(Weights *w, const Catalog *cat, TensorBytesFn bytes, void *provider, MatOverrideFn fn,
                          void *ctx);

#endif

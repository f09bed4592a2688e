/* schema.h - the complete list of tensors a K3-architecture checkpoint holds, derived from the
 * config alone (docs/MODEL.md 2.3, 2.4). One source of truth for synth (what to write), the
 * catalog (what must be there, with which dtype and shape) and the installer (what to fetch). */
#ifndef DF_SCHEMA_H
#define DF_SCHEMA_H

#include "format/config.h"
#include "format/safetensors.h"

#define SCHEMA_NAME_MAX 160
#define SCHEMA_PREFIX "language_model."

typedef enum {
    ROLE_SPINE,  /* resident linear weight (BF16 matrix): candidate for int8 conversion */
    ROLE_SMALL,  /* norms, biases, conv weights, A_log ... */
    ROLE_EMBED,  /* the token embedding */
    ROLE_EXPERT, /* one of a routed expert's six MXFP4 tensors */
} TensorRole;

/* Every non-expert tensor, by what it is: its name is spelled once, in schema.c's table, and read
 * through schema_tensor_name (the engine binds its weights by these, synth and the catalog list
 * them). The first group is every layer's, then one attention kind's, then one FFN kind's; from
 * TENSOR_EMBED on, the model's own (not a layer's). */
typedef enum {
    TENSOR_ATTN_NORM,      /* input_layernorm */
    TENSOR_ATTN_RES_NORM,  /* the attention's AttnRes norm and projection */
    TENSOR_ATTN_RES_PROJ,
    TENSOR_FFN_NORM,       /* post_attention_layernorm */
    TENSOR_FFN_RES_NORM,   /* the FFN's AttnRes norm and projection */
    TENSOR_FFN_RES_PROJ,
    TENSOR_KDA_Q, TENSOR_KDA_K, TENSOR_KDA_V, TENSOR_KDA_F_A, TENSOR_KDA_F_B, TENSOR_KDA_B,
    TENSOR_KDA_CONV_Q, TENSOR_KDA_CONV_K, TENSOR_KDA_CONV_V,
    TENSOR_KDA_A_LOG, TENSOR_KDA_DT_BIAS, TENSOR_KDA_O_NORM,
    TENSOR_ATTN_G,         /* the output gate and projection: KDA and MLA layers both have them */
    TENSOR_ATTN_O,
    TENSOR_MLA_Q_A, TENSOR_MLA_Q_A_NORM, TENSOR_MLA_Q_B, TENSOR_MLA_KV_A, TENSOR_MLA_KV_A_NORM, TENSOR_MLA_KV_B,
    TENSOR_MLP_GATE, TENSOR_MLP_UP, TENSOR_MLP_DOWN, /* a dense layer's FFN */
    TENSOR_ROUTER,         /* block_sparse_moe.gate */
    TENSOR_ROUTER_BIAS,    /* e_score_correction_bias: selection only */
    TENSOR_LATENT_DOWN, TENSOR_LATENT_NORM, TENSOR_LATENT_UP, /* the routed experts' latent projections */
    TENSOR_SHARED_GATE, TENSOR_SHARED_UP, TENSOR_SHARED_DOWN,
    TENSOR_EMBED,
    TENSOR_FINAL_NORM,
    TENSOR_OUT_RES_NORM,   /* the output AttnRes norm and projection */
    TENSOR_OUT_RES_PROJ,
    TENSOR_LM_HEAD,
    TENSOR_COUNT,
    TENSOR_EXPERT = TENSOR_COUNT, /* a routed expert's tensor (schema_expert names them) */
} SchemaTensor;

typedef struct {
    char name[SCHEMA_NAME_MAX];
    SchemaTensor tensor;
    Dtype dtype;
    int ndim;
    int64_t shape[3];
    TensorRole role;
} SchemaEntry;

#define SCHEMA_MAX_PER_LAYER 32

/* Non-expert tensors of layer l (0-based). Returns how many were written to out. */
int schema_layer(const K3Config *c, int layer, SchemaEntry *out);
/* Embedding, final norm, output AttnRes norm + projection, lm_head. Returns the count (5). */
int schema_globals(const K3Config *c, SchemaEntry *out);
/* The six tensors of routed expert e in MoE layer l, in their physical order
 * w1.packed, w1.scale, w2.packed, w2.scale, w3.packed, w3.scale. */
void schema_expert(const K3Config *c, int layer, int expert, SchemaEntry out[6]);

/* Writes the checkpoint's name of tensor t of layer `layer` (not read for the model's own tensors,
 * TENSOR_EMBED on) into buf, SCHEMA_NAME_MAX bytes. */
void schema_tensor_name(char *buf, SchemaTensor t, int layer);
/* Writes "language_model.model.layers.{layer}.{suffix}" into buf. */
void schema_layer_name(char *buf, int layer, const char *suffix);

uint64_t schema_nbytes(const SchemaEntry *e);

#endif

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

typedef struct {
    char name[SCHEMA_NAME_MAX];
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

/* Writes "language_model.model.layers.{layer}.{suffix}" into buf. */
void schema_layer_name(char *buf, int layer, const char *suffix);

uint64_t schema_nbytes(const SchemaEntry *e);

#endif

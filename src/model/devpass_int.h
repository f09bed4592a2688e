/* devpass_int.h - what the layer pass's files share (model/devpass.c the forward's schedule,
 * model/devmodel.c the model's and the States' device memory, model/devexperts.c the routed
 * experts): the Model's device resources (DevModel), a State's device copy (DevState), their sizes.
 * Private to those three files; the rest of the model sees model/internal.h. */
#ifndef DF_DEVPASS_INT_H
#define DF_DEVPASS_INT_H

#include "kernels/device.h"
#include "kernels/devops.h"
#include "model/devcache.h"
#include "model/internal.h"

/* One layer's vectors on the device (NULL where the layer has none). */
typedef struct {
    float *attn_norm, *ffn_norm, *attn_res_q, *ffn_res_q;
    float *conv[3], *decay_rate, *dt_bias, *o_norm; /* KDA */
    float *q_a_norm, *kv_a_norm;                    /* MLA */
    float *score_bias, *latent_norm;                /* MoE */
} DevLayer;

struct DevModel {
    MatDevice *dev;
    const DevOps *ops;
    void *scratch, *vecs;      /* the two allocations everything below points into */
    size_t scratch_bytes, vec_bytes;
    /* activations of MODEL_MAX_CHUNK rows ([row][width] each; anchors [anchor][row][hidden]) */
    float *P, *x, *xn, *attn_out, *ffn_out, *anchors, *res_scores;
    float *raw[3], *qkv[3], *g, *fa, *f, *beta_raw, *decay, *beta, *o;
    float *cq, *qf, *ckv, *qlat, *lctx, *att, *scores;
    float *h1, *h3, *router, *z, *y, *eo, *eh, *logits;
    float *xi, *xo;            /* a chunk's expert inputs and outputs, gathered by expert [rows x top_k][latent] */
    int *gather_idx;           /* [2][rows x top_k]: z row of each gathered input; gathered row of each (row, slot) */
    float *route_out;          /* rows x k ids (as int), then rows x k weights */
    float *route_host;         /* host staging: the routing back in one copy, then a chunk's expert layout up */
    DevLayer *layers;
    int layers_held;           /* spine layers the device kept at start-up (keep_spine) */
    int whole_spine;           /* it keeps every layer and the head: a pass copies no spine weight up */
    int recordable, n_recorded; /* this pass's stretches between waits are recorded (devops.h record); so far */
    float *final_norm, *out_res_q;
    /* routed experts: the expert cache (n_slots 0: none; all_kept: it holds every one, for good) */
    DevCache cache;
    int n_slots, all_kept;
    HostExperts way;
    double cost[2];            /* seconds per expert, moving average: [0] copied, [1] on the CPU */
    long samples[2], decisions;
};

struct DevState {
    float **kda;               /* per layer: conv windows then S (KDA layers), else NULL */
    float **latent;            /* per layer: the latent cache [cap][kv_lora + qk_rope] (MLA), else NULL */
    float **rec;               /* per KDA layer: a verify pass's replay records (Record), made at the first */
    int cap;                   /* positions the latent caches hold */
};

static inline size_t conv_floats(const K3Config *c) { return 3 * (size_t)config_kda_width(c) * (size_t)(c->conv_kernel - 1); }
static inline size_t kda_floats(const K3Config *c) {
    return conv_floats(c) + (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}
static inline size_t latent_width(const K3Config *c) { return (size_t)(c->kv_lora + c->qk_rope); }
static inline int max_anchors(const K3Config *c) { return (c->n_layers + c->attn_res_block - 1) / c->attn_res_block; }

/* A KDA layer's verify records, in one device allocation: the conv windows and matrices before the
 * pass (laid out as the State's), then per row the raw q, k, v projections, the decay-gate
 * pre-activation and the beta pre-activation: what the KDA operation reads, so replaying rows
 * [0, n) is that operation on them. */
typedef struct {
    float *conv, *S, *raw[3], *f, *beta_raw;
} Record;

static inline Record record_at(const K3Config *c, float *base) {
    const size_t W = (size_t)config_kda_width(c), MV = MODEL_MAX_VERIFY;
    Record r = {base, base + conv_floats(c), {NULL, NULL, NULL}, NULL, NULL};
    float *rows = base + kda_floats(c);
    for (int i = 0; i < 3; i++) r.raw[i] = rows + (size_t)i * MV * W;
    r.f = rows + 3 * MV * W, r.beta_raw = rows + 4 * MV * W;
    return r;
}

static inline size_t record_floats(const K3Config *c) {
    return kda_floats(c) + MODEL_MAX_VERIFY * (4 * (size_t)config_kda_width(c) + (size_t)c->kda_heads);
}

/* Whether the device holds the current copy of every matrix of layer L: a pass then reads none of
 * the layer's bytes on the host, and a streamed layer need not be read again (devmodel.c). */
int devpass_holds_layer(const DevModel *g, const LayerWeights *L);
/* Makes the State's device copy current and able to hold T more positions (devmodel.c). */
int devpass_state_up(Model *m, State *s, int T);
/* The T rows' routed experts of layer `layer` into the scratch's eo (devexperts.c); hybrid: experts
 * the cache misses may run on the CPU threads (their input z is on the host, m->s.z). */
int devpass_routed(Model *m, int layer, int T, int hybrid);

#endif

/* internal.h - what the model's files share: the Model and State layouts and the per-part entry
 * points the forward schedule (k3.c) calls. Not for use outside src/model/. */
#ifndef DF_MODEL_INTERNAL_H
#define DF_MODEL_INTERNAL_H

#include "model/model.h"

typedef struct {
    float *conv;    /* KDA: 3 streams x [width][kernel-1] previous raw inputs, oldest first */
    float *S;       /* KDA: [heads][head_dim (key)][head_dim (value)] */
    float *keys;    /* MLA, expanded cache: [cap][heads][qk_nope + qk_rope] */
    float *values;  /* MLA, expanded cache: [cap][heads][v_head] */
    float *latent;  /* MLA, latent cache: [cap][kv_lora + qk_rope] (normalised c, raw k_pe) */
    /* KDA, during a verification (allocated at the first one): what replaying a prefix of the
     * rows needs; see kda_commit */
    float *v_S;     /* S before the verify pass */
    float *v_conv;  /* conv windows before the verify pass */
    float *v_raw;   /* [3][MODEL_MAX_VERIFY][width] raw conv inputs per row */
    float *v_step;  /* [MODEL_MAX_VERIFY][3 * width + heads]: normalised k, v, decay, beta per row */
} LayerState;

typedef struct DevState DevState;
typedef struct DevModel DevModel;

struct State {
    const Model *model;
    LayerState *layers;
    int len;        /* positions consumed */
    int cap;        /* MLA cache capacity in positions */
    int verify_rows; /* rows of a pending verification, 0 when none */
    /* The device's copy of the state (devpass.c), NULL until a forward ran there: dev_newer when it
     * holds the latest state (the arrays above are behind), dev_stale when the arrays changed
     * since it was made; dev_verify when the last forward was a verify pass on the device (its
     * replay records are there, not in the arrays above). */
    DevState *dev;
    int dev_newer, dev_stale, dev_verify;
};

/* Scratch for one chunk, sized for MODEL_MAX_CHUNK rows; allocated once per model. */
typedef struct {
    float *P, *anchors, *x, *xn, *attn_out, *ffn_out;
    /* KDA */ float *q, *k, *v, *g, *fa, *f, *beta_raw, *o;
    /* MLA */ float *cq, *qf, *ckv, *kvf, *att, *scores;
    float *qlat, *lctx;  /* MLA latent cache: per head, the absorbed query and the attended latent */
    /* FFN */ float *h1, *h3, *router, *z, *eo, *y, *ex_in, *ex_h1, *ex_h3, *ex_out;
    int *sel;       /* [T][top_k] selected experts */
    int *look_sel;  /* [T][top_k] router lookahead's guess at the next layer's selections */
    float *look_w;  /* [T][top_k] (unused weights of the guess) */
    float *sel_w;   /* [T][top_k] their weights */
} Scratch;

struct Model {
    K3Config cfg;
    const Catalog *cat;
    Weights w;
    ExpertSource *experts;
    SpineSource *spine;     /* where the spine tensors come from (borrowed) */
    Pool *pool;
    Scratch s;
    int max_context;
    int look_layer; /* the layer look_sel guesses at, -1 for none */
    int verifying;  /* the current forward records KDA replay data (model_forward_verify) */
    int chunk_pos;  /* position of the current forward's first row */
    MlaCacheMode mla_cache;
    ModelStats stats;
    DevModel *dev;  /* decode steps on the device (model_use_device), or NULL */
};

/* The chunk scratch (scratch.c): allocated once for max_context positions, freed with the model;
 * scratch_bytes is what scratch_alloc allocates. */
void scratch_alloc(Scratch *s, const K3Config *c, int max_context);
void scratch_free(Scratch *s, const K3Config *c);
uint64_t scratch_bytes(const K3Config *c, int max_context);
/* What state.c allocates: a State holding `positions` positions (state_create plus the MLA cache
 * grown to hold them), and a State's speculation replay records (state_prepare_verify). */
uint64_t state_bytes(const K3Config *c, MlaCacheMode mla, int positions);
uint64_t state_verify_bytes(const K3Config *c);

/* One sequence's rows in a forward pass: rows [row0, row0 + rows) of the chunk belong to st,
 * after its st->len positions. A pass over several sequences runs every weight product once
 * over all rows; only attention's per-sequence part (KDA conv windows and recurrence, the MLA
 * cache) runs sequence by sequence on its own rows. */
typedef struct {
    State *st;
    int row0, rows;
} Seq;

/* Attention of layer l for the chunk's T rows (xn, out: [T][hidden]), split into seqs[0..n). */
void kda_forward(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n, const float *xn, int T, float *out);
void mla_forward(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n, const float *xn, int T, float *out);
void mlp_forward(Model *m, const MlpWeights *w, int width, const float *u, int T, float *out);
/* a[i] = SiTU(a[i], b[i]) for i < n, on the compute pool (moe.c). */
void model_situ(Model *m, float *a, const float *b, size_t n);
int moe_forward(Model *m, const LayerWeights *L, int layer, const float *u, int T, float *out);
/* Router lookahead, called once layer's selections (s->sel) are known: scores the guess made
 * for this layer and guesses the next layer's from u (this layer's FFN input). */
void lookahead(Model *m, int layer, const float *u, int T);
/* Top-k over bias-corrected sigmoid scores; weights renormalised over the unbiased scores. */
void moe_route(const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights);
/* The distinct experts the chunk's T rows selected (s->sel), ascending, into ids; returns how many. */
int moe_distinct_experts(const Model *m, int T, int *ids);

/* Rolls a KDA layer back to the state after the first n rows of the verify pass (n < T). */
void kda_commit(const Model *m, LayerState *st, int n);

/* Allocates the KDA replay records of a State (once). */
void state_prepare_verify(State *s);

/* Ensures the MLA caches hold `need` positions (grows geometrically). */
int state_reserve(State *s, int need);

/* k3.c, for the device pass: layer l's spine tensors readable (and rebound when they moved); the
 * finite check of a forward's logits (positions rows[i] of n). */
int model_acquire_layer(Model *m, int l);
/* A pass's use of layer l: acquired (1: model_leave_layer releases it), or not acquired because the
 * layer pass's device holds every matrix of it (0); -1 on failure. */
int model_enter_layer(Model *m, int l);
void model_leave_layer(Model *m, int l, int entered);
int model_check_logits(const Model *m, const float *logits, const int *rows, int n);

/* devpass.c: a forward of T rows of one or more sequences (a decode step, a prefill chunk, a verify
 * pass, the server's batches) with the layers on the device, when devpass_takes says it can run it;
 * logits: NULL, or [n_out][vocab] for rows out_rows[0..n_out). The States' device copies. */
int devpass_takes(const Model *m, int n_seqs, int T);
/* Whether the layer pass's device holds the current copy of W: a product of W then reads no host
 * memory, so W may be used while its streamed layer is not acquired. */
int devpass_holds(const Model *m, const Mat *W);
/* Whether the layer pass's device holds every matrix of layer l: a pass on the host (a batch of
 * sequences) then need not acquire the layer either, as its products run on the device's copies. */
int devpass_layer_held(const Model *m, int l);
int devpass_forward(Model *m, const Seq *seqs, int n_seqs, const int *tokens, int T, const int *out_rows, int n_out,
                    float *logits);
/* 1 when the State's verify records are on the device (made at its first verify pass there), 0
 * when they are not and cannot be (no device copy yet, or no room: the verify pass then runs on
 * the host). */
int devpass_records(Model *m, State *s);
/* state_commit of a verify pass that ran on the device (dev_verify): replays its first n rows there. */
void devpass_commit(State *s, int n);
/* Brings the State's arrays up to date from its device copy (no-op when they are). 0, or -1 with
 * the device's fault. */
int state_to_host(State *s);
/* The State's arrays changed on the host: its device copy is re-made before the next device pass. */
void state_host_changed(State *s);
void devpass_state_free(State *s);

#endif

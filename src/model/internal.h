/* internal.h - what the model's files share: the Model and State layouts, the model's device
 * resources (DevModel: the device that runs its layers, its memory, its expert cache) and a State's
 * copy on that device (DevState), and the parts of the one layer schedule (k3.c) kept in files of
 * their own (kda.c, mla.c, ffn.c, experts.c). Not for use outside src/model/.
 *
 * The device. Every forward runs its layers as the operations of kernels/devops.h on one device:
 * the CPU device (kernels/cpu/, host memory) unless model_use_device gave the model an accelerator.
 * The schedule does not know which: it allocates through the device, queues its operations, and
 * brings back only what the host must see (each MoE layer's routing, the logits). */
#ifndef DF_MODEL_INTERNAL_H
#define DF_MODEL_INTERNAL_H

#include "kernels/device.h"
#include "kernels/devops.h"
#include "model/devcache.h"
#include "model/model.h"

/* One sequence's state in host memory: what state_save writes, state_copy copies and state_equal
 * compares. On the CPU device these arrays are the device's copy too (DevState points into them);
 * an accelerator keeps its own copy and the two are synchronised (state_to_host, state_host_changed). */
typedef struct {
    float *kda;     /* KDA: the conv windows, 3 streams x [width][kernel-1] previous raw inputs, oldest
                     * first, then the recurrent matrices [heads][head_dim (key)][head_dim (value)] */
    float *keys;    /* MLA, expanded cache: [cap][heads][qk_nope + qk_rope] */
    float *values;  /* MLA, expanded cache: [cap][heads][v_head] */
    float *latent;  /* MLA, latent cache: [cap][kv_lora + qk_rope] (normalised c, raw k_pe) */
} LayerState;

typedef struct DevState DevState;
typedef struct DevModel DevModel;

struct State {
    const Model *model;
    LayerState *layers;
    int len;        /* positions consumed */
    int cap;        /* MLA cache capacity in positions */
    int verify_rows; /* rows of a pending verification, 0 when none */
    /* The device's copy of the state, NULL until a forward ran: dev_newer when it holds the latest
     * state (the arrays above are behind), dev_stale when the arrays changed since it was made (an
     * accelerator's only: the CPU device's copy is the arrays). A verify pass keeps its replay
     * records with the device's copy. */
    DevState *dev;
    int dev_newer, dev_stale;
};

/* A layer's routed experts in a pass: the distinct ones (ascending), how the pass's rows are laid
 * out by expert (expert j on the gathered rows [at[j], at[j] + rows[j]), gathered row q holding the
 * pass's row src[q]), and the arrays a batch of them is run with. Sized for the model's experts and
 * its largest pass. */
typedef struct {
    int *ids, n;               /* [n_experts] the distinct experts, ascending; n of them */
    int *order;                /* [n_experts] the order they are acquired in */
    int *at, *rows, *fill;     /* [n_experts] per distinct expert: its gathered rows */
    int *src, *sel_of;         /* [rows * top_k] the pass row and the selection (row * top_k + i) of each gathered row */
    int *index, *way, *where, *miss; /* [n_experts] per expert of a batch: its place in ids, how it runs, its slot */
    int *dslot, *l_at, *l_rows; /* [n_experts] a launch's experts */
    const Mat **w1, **w2, **w3; /* [n_experts] a launch's matrices */
    ExpertMats *mats;          /* [n_experts] an acquired batch */
    unsigned char *seen;       /* [n_experts] zero between passes */
} Routed;

/* Host buffers for a pass of up to the model's max_rows rows: what the schedule stages between the
 * host and the device, and what the CPU threads compute with beside an accelerator (hybrid: z and
 * ex_*, allocated by model_use_device). Router lookahead runs on passes of at most
 * MODEL_MAX_VERIFY rows (x, router, look_*). */
typedef struct {
    float *P;       /* [rows][hidden]: the tokens' embedding rows, sent up */
    float *x;       /* [MODEL_MAX_VERIFY][hidden]: a MoE layer's FFN input, brought back for router lookahead */
    float *router;  /* [MODEL_MAX_VERIFY][n_experts]: lookahead's router logits */
    int *sel;       /* [rows][top_k] selected experts */
    float *sel_w;   /* [rows][top_k] their weights */
    int *look_sel;  /* [MODEL_MAX_VERIFY][top_k] router lookahead's guess at the next layer's selections */
    float *look_w;  /* [MODEL_MAX_VERIFY][top_k] (unused weights of the guess) */
    int *out_rows;  /* [rows] the rows whose logits a pass returns */
    Routed routed;
    float *z;       /* hybrid: [rows][latent] the routed experts' input, brought back for the CPU threads */
    float *ex_in, *ex_h, *ex_out; /* hybrid: one expert on the CPU threads: its rows, [2][rows][moe_inter], its output */
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
    int max_rows;   /* the most rows a pass may have: the prefill window (model_max_rows) */
    int look_layer; /* the layer look_sel guesses at, -1 for none */
    int verifying;  /* the current forward records KDA replay data (model_forward_verify) */
    int chunk_pos;  /* position of the current forward's first row */
    MlaCacheMode mla_cache;
    ModelStats stats;
    MatDevice *cpu;     /* the CPU device (owned): runs the layers unless an accelerator does */
    MatDevice *helper;  /* beside an accelerator: a CPU device on the CPU kernels for the experts it does
                         * not hold (K3_DEV_HOST_EXPERTS), or NULL (owned) */
    DevModel *dev;      /* the layers' device and its resources (never NULL after model_create) */
    int (*watch)(void *ctx, int layer, int n_layers); /* model_watch_layers, or NULL */
    void *watch_ctx;
    float *undo;        /* [n_kda_layers][kda_floats]: a stoppable forward's KDA states as they were
                         * before it (the CPU device), made on first use; NULL until then */
};

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
    int host;                  /* the device's memory is the host's (the CPU device) */
    void *scratch, *vecs;      /* the two allocations everything below points into */
    size_t scratch_bytes, vec_bytes;
    int rows;                  /* the most rows of a pass (the model's max_rows) */
    int mlp_rows;              /* rows of h1, h3: the dense and shared MLPs run in groups of this many */
    int eh_rows;               /* rows of each half of eh: one call's experts' rows together at most */
    int logit_rows;            /* rows of logits: the head runs in groups of this many */
    int attn_rows;             /* rows of the attention buffers: a layer's attention runs in groups of this many */
    /* activations of a pass ([row][width] each; anchors [anchor][row][hidden]) */
    float *P, *x, *xn, *attn_out, *ffn_out, *anchors, *res_scores;
    float *raw[3], *qkv[3], *g, *fa, *f, *beta_raw, *decay, *beta, *o;
    float *cq, *qf, *ckv, *qlat, *lctx, *att, *scores, *kvf;
    float *h1, *h3, *router, *z, *y, *eo, *eh, *logits;
    float *xi, *xo;            /* a call's experts' inputs and outputs, gathered by expert [eh_rows][latent] */
    int *gather_idx;           /* [2][eh_rows]: a call's z row of each gathered input, then the eo row of each output
                                * (the head's rows gather with the first half) */
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
    HostExperts way;           /* (an accelerator's) experts its cache misses */
    double cost[2];            /* seconds per expert, moving average: [0] copied, [1] on the CPU */
    long samples[2], decisions;
};

struct DevState {
    float **kda;               /* per layer: conv windows then S (KDA layers), else NULL */
    float **latent;            /* per layer: the latent cache [cap][kv_lora + qk_rope] (MLA), else NULL */
    float **keys, **values;    /* per layer: the expanded cache (MLA; the CPU device only), else NULL */
    float **rec;               /* per KDA layer: a verify pass's replay records (Record), made at the first */
    int cap;                   /* positions the MLA caches hold */
    const MatDevice *on;       /* the device it was made on (the model's device may have changed since) */
};

static inline size_t conv_floats(const K3Config *c) { return 3 * (size_t)config_kda_width(c) * (size_t)(c->conv_kernel - 1); }
static inline size_t kda_floats(const K3Config *c) {
    return conv_floats(c) + (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}
static inline size_t latent_width(const K3Config *c) { return (size_t)(c->kv_lora + c->qk_rope); }
static inline size_t key_floats(const K3Config *c) { return (size_t)c->mla_heads * config_mla_qk_dim(c); }
static inline size_t value_floats(const K3Config *c) { return (size_t)c->mla_heads * c->v_head; }
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

/* One sequence's rows in a forward pass: rows [row0, row0 + rows) of the pass belong to st, after
 * its st->len positions. A pass over several sequences runs every weight product once over all
 * rows; only attention's per-sequence part (KDA conv windows and recurrence, the MLA cache) runs
 * sequence by sequence on its own rows. Attention runs on groups of the pass's rows at a time (the
 * device's attn_rows): a group's part of each sequence is a Seq of its own. */
typedef struct {
    State *st;
    int row0, rows;
    int pos;        /* the State position of row row0 (its length before the pass, or more for a later group) */
} Seq;

/* ---- the schedule's parts ---- */

/* Attention of layer l for the pass's T rows, from the device's xn into its attn_out (kda.c, mla.c). */
void kda_attention(Model *m, int l, const Seq *seqs, int n_seqs, int T);
void mla_attention(Model *m, int l, const Seq *seqs, int n_seqs, int T);
/* state_commit of a verify pass: the KDA layers replayed over the first n rows from the records. */
void kda_commit(State *s, int n);
/* The FFN of layer l for the pass's T rows, from the device's x into its ffn_out (ffn.c). */
int ffn_forward(Model *m, int l, int T);
/* The T rows' routed experts of layer `layer` into the device's eo (experts.c); hybrid: experts the
 * accelerator's cache misses may run on the CPU threads (their input z is on the host, m->s.z). */
int routed_experts(Model *m, int layer, int T, int hybrid);
/* Router lookahead, called once layer's selections (s->sel) are known: scores the guess made
 * for this layer and guesses the next layer's from u (this layer's FFN input, on the host). */
void lookahead(Model *m, int layer, const float *u, int T);
/* Whether a pass of T rows guesses ahead (the source takes guesses, and the pass is a decode step or
 * a verify pass). */
int lookahead_wanted(const Model *m, int T);
/* Records what is queued from here to the next wait, when the pass may be recorded (k3.c). */
void record_stretch(Model *m);

/* Layer l's spine tensors readable (and rebound when they moved). */
int model_acquire_layer(Model *m, int l);

/* ---- the device's memory (devmem.c) ---- */

/* The model's resources on dev: its scratch, its vectors, the spine it keeps, its expert cache.
 * Replaces the previous device's (given back first). 0, or -1 with a message. */
int devmem_open(Model *m, MatDevice *dev, HostExperts way, CachePolicy policy);
void devmem_close(Model *m);
/* Whether the device holds the current copy of W: a product of W then reads no host memory, so W
 * may be used while its streamed layer is not acquired. */
int devmem_holds(const Model *m, const Mat *W);
/* Whether the device holds every matrix of layer l: a pass then need not acquire it. */
int devmem_layer_held(const Model *m, int l);
/* Makes the State's device copy current and able to hold T more positions. */
int devmem_state_up(Model *m, State *s, int T);
/* 1 when the State's verify records exist on the device (made at its first verify pass), 0 when they
 * cannot be made (no room, with a message). */
int devmem_records(Model *m, State *s);
/* Brings the State's arrays up to date from its device copy (no-op when they are, and on the CPU
 * device). 0, or -1 with the device's fault. */
int state_to_host(State *s);
/* The State's arrays changed on the host: its device copy is re-made before the next pass. */
void state_host_changed(State *s);
void devmem_state_free(State *s);

/* ---- the host scratch and the State's arrays ---- */

/* Allocates what is not allocated yet of the buffers for passes of up to `rows` rows (hybrid: the
 * CPU threads' too); scratch_bytes is what that takes in all. */
void scratch_alloc(Scratch *s, const K3Config *c, int rows, int hybrid);
void scratch_free(Scratch *s, const K3Config *c);
uint64_t scratch_bytes(const K3Config *c, int rows, int hybrid);
/* What the device's scratch takes for a model of config c, max_context positions and passes of up
 * to `rows` rows. */
uint64_t devmem_scratch_bytes(const K3Config *c, MlaCacheMode mla, int max_context, int rows);
/* What state.c allocates: a State holding `positions` positions (state_create plus the MLA cache
 * grown to hold them), and a State's speculation replay records. */
uint64_t state_bytes(const K3Config *c, MlaCacheMode mla, int positions);
uint64_t state_verify_bytes(const K3Config *c);
/* Ensures the MLA caches hold `need` positions (grows geometrically). */
int state_reserve(State *s, int need);

#endif

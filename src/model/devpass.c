/* devpass.c - a forward of one sequence (a decode step, a prefill chunk of up to MODEL_MAX_CHUNK
 * positions, or a verify pass) with every layer on the device (kernels/devops.h): the same schedule
 * as k3.c, kda.c, mla.c and moe.c, step for step, on device memory.
 *
 * Memory. The Model owns its device scratch (MODEL_MAX_CHUNK rows of every activation) and a device
 * copy of its small vectors (norm weights, AttnRes queries, conv taps, decay rates, biases), made
 * once by model_use_device, which also copies the spine's matrices and, from an in-place expert
 * source, the experts that fit: the device keeps those under their residency keys, so a forward
 * reads weights from device memory only. Each State owns a device copy of its KDA windows and
 * matrices and of its MLA latent cache (DevState), made at its first device pass and kept there: a
 * pass leaves the State's host arrays behind (dev_newer), and anything that reads them (a CPU pass,
 * copies, saves, comparisons) brings them back first (state_to_host); anything that writes them
 * marks the device copy stale, and the next device pass copies them up again.
 *
 * What goes up per pass: the tokens' embedding rows (and, per MoE layer of a chunk, where each
 * row's inputs go among its experts'). What comes back: each MoE layer's routing (the expert source
 * must see the selections, and acquire the experts), and the logits.
 *
 * Speculation. A verify pass on the device keeps its replay records there too (per KDA layer: the
 * matrices and conv windows before the pass and each row's conv inputs, decay-gate and beta
 * pre-activations), and state_commit of n rows replays the first n rows there with the same
 * kernel (devpass_commit): a verify pass moves no state across PCIe. The MLA rows past the kept
 * ones are dropped by the State's length, as on the host.
 *
 * Routed experts live in an expert cache in device memory (model/devcache.h: slots the device
 * provides, run by the host store's policy). Those it does not hold are either copied into it (on
 * the device's copy stream, while the compute stream works on the shared experts and the held
 * ones) or computed by the CPU threads from host memory meanwhile (the hybrid path); HostExperts
 * says which, or lets the measured seconds per expert of each decide. In a chunk each distinct
 * expert is read once for all the rows that chose it: their inputs are gathered, the expert runs on
 * them as one product of that many rows, and the outputs go back to each row's slot. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/devops.h"
#include "model/devcache.h"
#include "model/internal.h"
#include "model/ops.h"
#include "util/clock.h"
#include "util/err.h"

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

/* ---- sizes ---- */

static size_t conv_floats(const K3Config *c) { return 3 * (size_t)config_kda_width(c) * (size_t)(c->conv_kernel - 1); }
static size_t kda_floats(const K3Config *c) {
    return conv_floats(c) + (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}
static size_t latent_width(const K3Config *c) { return (size_t)(c->kv_lora + c->qk_rope); }
static int max_anchors(const K3Config *c) { return (c->n_layers + c->attn_res_block - 1) / c->attn_res_block; }

/* A KDA layer's verify records, in one device allocation: the conv windows and matrices before the
 * pass (laid out as the State's), then per row the raw q, k, v projections, the decay-gate
 * pre-activation and the beta pre-activation: what the KDA operation reads, so replaying rows
 * [0, n) is that operation on them. */
typedef struct {
    float *conv, *S, *raw[3], *f, *beta_raw;
} Record;

static Record record_at(const K3Config *c, float *base) {
    const size_t W = (size_t)config_kda_width(c), MV = MODEL_MAX_VERIFY;
    Record r = {base, base + conv_floats(c), {NULL, NULL, NULL}, NULL, NULL};
    float *rows = base + kda_floats(c);
    for (int i = 0; i < 3; i++) r.raw[i] = rows + (size_t)i * MV * W;
    r.f = rows + 3 * MV * W, r.beta_raw = rows + 4 * MV * W;
    return r;
}

static size_t record_floats(const K3Config *c) {
    return kda_floats(c) + MODEL_MAX_VERIFY * (4 * (size_t)config_kda_width(c) + (size_t)c->kda_heads);
}

/* Carving one allocation into buffers: a first pass (base NULL) counts, a second assigns. Each
 * buffer starts on a 64-float boundary. */
typedef struct {
    char *base;
    size_t used;
} Carve;

static float *carve(Carve *cv, size_t floats) {
    float *p = cv->base ? (float *)(cv->base + cv->used) : NULL;
    cv->used += (floats + 63) / 64 * 64 * sizeof(float);
    return p;
}

/* The scratch for chunks of MODEL_MAX_CHUNK rows; the MLA scores hold one row's heads over the whole
 * context (a chunk's rows take turns when they do not fit together). */
static void carve_scratch(DevModel *g, const K3Config *c, int max_context, Carve *cv) {
    const size_t H = (size_t)c->hidden, W = (size_t)config_kda_width(c), NH = (size_t)c->mla_heads;
    const size_t ffn = c->dense_inter > c->shared_inter ? (size_t)c->dense_inter : (size_t)c->shared_inter;
    const size_t R = MODEL_MAX_CHUNK, RK = R * (size_t)c->top_k;
    g->P = carve(cv, R * H), g->x = carve(cv, R * H), g->xn = carve(cv, R * H);
    g->attn_out = carve(cv, R * H), g->ffn_out = carve(cv, R * H);
    g->anchors = carve(cv, R * H * (size_t)max_anchors(c)), g->res_scores = carve(cv, R * ((size_t)max_anchors(c) + 1));
    for (int i = 0; i < 3; i++) g->raw[i] = carve(cv, R * W), g->qkv[i] = carve(cv, R * W);
    g->g = carve(cv, R * (W > NH * c->v_head ? W : NH * c->v_head));
    g->fa = carve(cv, R * c->kda_head_dim), g->f = carve(cv, R * W), g->beta_raw = carve(cv, R * c->kda_heads);
    g->decay = carve(cv, R * W), g->beta = carve(cv, R * c->kda_heads), g->o = carve(cv, R * W);
    g->cq = carve(cv, R * (size_t)(c->q_lora > c->kv_lora ? c->q_lora : c->kv_lora));
    g->qf = carve(cv, R * NH * (size_t)config_mla_qk_dim(c)), g->ckv = carve(cv, R * latent_width(c));
    g->qlat = carve(cv, R * NH * c->kv_lora), g->lctx = carve(cv, R * NH * c->kv_lora), g->att = carve(cv, R * NH * c->v_head);
    g->scores = carve(cv, NH * (size_t)max_context);
    g->h1 = carve(cv, R * ffn), g->h3 = carve(cv, R * ffn), g->router = carve(cv, R * c->n_experts);
    g->z = carve(cv, R * c->latent), g->y = carve(cv, R * c->latent);
    g->eo = carve(cv, RK * c->latent), g->eh = carve(cv, 2 * RK * c->moe_inter);
    g->xi = carve(cv, RK * c->latent), g->xo = carve(cv, RK * c->latent), g->gather_idx = (int *)carve(cv, 2 * RK);
    g->route_out = carve(cv, 2 * RK), g->logits = carve(cv, R * c->vocab);
}

/* The vectors of layer l (or the globals, l < 0) with their lengths: pointers to the host copy
 * and to the device field. Returns how many. */
static int layer_vectors(const Model *m, DevModel *g, int l, float **host, float ***dev, size_t *n) {
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden, W = (size_t)config_kda_width(c);
    int k = 0;
#define VEC(h, d, len) (host[k] = (h), dev[k] = &(d), n[k++] = (len))
    if (l < 0) {
        VEC(m->w.final_norm, g->final_norm, H);
        VEC(m->w.out_res_q, g->out_res_q, H);
        return k;
    }
    const LayerWeights *L = &m->w.layers[l];
    DevLayer *D = &g->layers[l];
    VEC(L->attn_norm, D->attn_norm, H), VEC(L->ffn_norm, D->ffn_norm, H);
    VEC(L->attn_res_q, D->attn_res_q, H), VEC(L->ffn_res_q, D->ffn_res_q, H);
    if (L->kind == LAYER_KDA) {
        const float *conv[3] = {L->kda.conv_q, L->kda.conv_k, L->kda.conv_v};
        for (int i = 0; i < 3; i++) VEC((float *)conv[i], D->conv[i], W * (size_t)c->conv_kernel);
        VEC(L->kda.decay_rate, D->decay_rate, m->w.a_log_mode == ALOG_PER_HEAD ? (size_t)c->kda_heads : (size_t)c->kda_head_dim);
        VEC(L->kda.dt_bias, D->dt_bias, W), VEC(L->kda.o_norm, D->o_norm, (size_t)c->kda_head_dim);
    } else {
        VEC(L->mla.q_a_norm, D->q_a_norm, (size_t)c->q_lora), VEC(L->mla.kv_a_norm, D->kv_a_norm, (size_t)c->kv_lora);
    }
    if (L->moe) VEC(L->moe_w.score_bias, D->score_bias, (size_t)c->n_experts), VEC(L->moe_w.latent_norm, D->latent_norm, (size_t)c->latent);
#undef VEC
    return k;
}

enum { MAX_LAYER_VECTORS = 16 };

/* Places every vector in one allocation (a first pass with no base counts) and, with put, copies it. */
static void carve_vectors(Model *m, DevModel *g, Carve *cv, int put) {
    for (int l = -1; l < m->cfg.n_layers; l++) {
        float *host[MAX_LAYER_VECTORS], **dev[MAX_LAYER_VECTORS];
        size_t n[MAX_LAYER_VECTORS];
        int k = layer_vectors(m, g, l, host, dev, n);
        for (int i = 0; i < k; i++) {
            *dev[i] = carve(cv, n[i]);
            if (put) g->ops->put(g->dev, *dev[i], host[i], n[i] * sizeof(float));
        }
    }
}

/* ---- weights made resident ---- */

/* The layer's matrices (attention, then the FFN's); returns how many (at most 16). */
static int layer_mats(const LayerWeights *L, const Mat **mats) {
    int n = 0;
    if (L->kind == LAYER_KDA) {
        const KdaWeights *k = &L->kda;
        const Mat *kda[] = {&k->q, &k->k, &k->v, &k->g, &k->f_a, &k->f_b, &k->b, &k->o};
        for (int i = 0; i < 8; i++) mats[n++] = kda[i];
    } else {
        const MlaWeights *a = &L->mla;
        const Mat *mla[] = {&a->q_a, &a->q_b, &a->kv_a, &a->kv_b, &a->g, &a->o};
        for (int i = 0; i < 6; i++) mats[n++] = mla[i];
    }
    const MlpWeights *mlp = L->moe ? &L->moe_w.shared : &L->dense;
    if (L->moe) mats[n++] = &L->moe_w.router, mats[n++] = &L->moe_w.latent_down, mats[n++] = &L->moe_w.latent_up;
    if (mlp->gate.rows) mats[n++] = &mlp->gate, mats[n++] = &mlp->up, mats[n++] = &mlp->down;
    return n;
}

/* Copies the layer's matrices to the device, as far as it keeps them: 1 when it kept them all. */
static int keep_layer_mats(DevModel *g, const LayerWeights *L) {
    const Mat *mats[16];
    int n = layer_mats(L, mats), kept = 1;
    for (int i = 0; i < n; i++) kept &= g->ops->keep(g->dev, mats[i]);
    return kept;
}

/* Whether the device holds the current copy of every matrix of the layer: a step then reads none
 * of the layer's bytes on the host, and a streamed layer need not be read again. */
static int holds_layer(const DevModel *g, const LayerWeights *L) {
    const Mat *mats[16];
    int n = layer_mats(L, mats);
    for (int i = 0; i < n; i++)
        if (!g->ops->holds(g->dev, mats[i])) return 0;
    return 1;
}

/* Every spine layer the device has room for: a pinned one from where it lies, a streamed one
 * read once into a stream buffer, copied, and let go (the copy must finish before the buffer is
 * refilled). Layers beyond the room keep streaming at every pass. */
static int keep_spine(Model *m, DevModel *g) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const int streamed = l >= m->spine->resident_layers;
        if (streamed && model_acquire_layer(m, l)) return -1;
        int kept = keep_layer_mats(g, &m->w.layers[l]);
        int rc = streamed ? g->ops->get(g->dev, NULL, NULL, 0) : 0;
        if (streamed && m->spine->release_layer) m->spine->release_layer(m->spine, l);
        if (rc) return -1;
        if (kept && streamed && m->spine->held_elsewhere) m->spine->held_elsewhere(m->spine, l);
        g->layers_held += kept;
    }
    return 0;
}

/* Every expert of every MoE layer copied into the cache (its slots hold them all). */
static int fill_cache(Model *m, DevModel *g) {
    const K3Config *c = &m->cfg;
    ExpertSource *src = m->experts;
    int ids[MODEL_MAX_ROUTED];
    ExpertMats mats[MODEL_MAX_ROUTED];
    const int batch = src->max_batch > 0 && src->max_batch < MODEL_MAX_ROUTED ? src->max_batch : MODEL_MAX_ROUTED;
    for (int l = 0; l < c->n_layers; l++) {
        if (!m->w.layers[l].moe) continue;
        devcache_layer(&g->cache, l);
        for (int at = 0; at < c->n_experts; at += batch) {
            int n = c->n_experts - at < batch ? c->n_experts - at : batch;
            for (int i = 0; i < n; i++) ids[i] = at + i;
            if (src->acquire(src, l, ids, n, mats)) return -1;
            for (int i = 0; i < n; i++) {
                int slot = devcache_admit(&g->cache, ids[i], &mats[i].w1.key);
                if (slot < 0) return df_fail("the expert cache cannot hold every expert"); /* (it was sized to) */
                g->ops->slot_fill(g->dev, slot, &mats[i].w1, &mats[i].w2, &mats[i].w3);
            }
        }
    }
    g->all_kept = 1;
    return g->ops->fills_wait(g->dev);
}

/* The expert cache: as many slots as the device has room for (no more than there are experts),
 * run by the host store's policy; filled now when every expert fits and the source's memory never
 * changes, else empty. */
static int make_cache(Model *m, DevModel *g, CachePolicy policy) {
    const K3Config *c = &m->cfg;
    int moe = 0;
    for (int l = 0; l < c->n_layers; l++) moe += m->w.layers[l].moe;
    const long total = (long)moe * c->n_experts;
    if (total == 0) return g->all_kept = 1, 0;
    g->n_slots = g->ops->expert_slots(g->dev, (size_t)m->cat->expert_bytes, total < INT_MAX ? (int)total : INT_MAX);
    if (g->n_slots == 0) return 0;
    devcache_init(&g->cache, policy, g->n_slots, c->n_layers, c->n_experts, &m->stats.dev_cache);
    if (g->n_slots < total || !m->experts->in_place) return 0;
    const DevCacheCounts before = m->stats.dev_cache;
    int rc = fill_cache(m, g);
    m->stats.dev_cache = before; /* the start-up copies are not the decode's */
    return rc;
}

/* ---- the model's device resources ---- */

static int dims_supported(const K3Config *c) {
    return c->n_experts <= 8192 && c->top_k <= K3_MAX_TOP_K && c->kda_head_dim <= 1024;
}

int model_use_device(Model *m, HostExperts way, CachePolicy policy) {
    MatDevice *dev = device_current();
    if (m->dev || !dev || !dev->ops || !dims_supported(&m->cfg)) return 0;
    DevModel *g = df_calloc(1, sizeof *g);
    g->dev = dev, g->ops = dev->ops, g->way = way;
    g->layers = df_calloc((size_t)m->cfg.n_layers, sizeof *g->layers);
    g->route_host = df_malloc(2 * sizeof(float) * MODEL_MAX_CHUNK * (size_t)m->cfg.top_k);
    Carve cv = {NULL, 0};
    carve_scratch(g, &m->cfg, m->max_context, &cv);
    g->scratch_bytes = cv.used;
    g->scratch = g->ops->alloc(dev, cv.used);
    Carve vv = {NULL, 0};
    carve_vectors(m, g, &vv, 0);
    g->vec_bytes = vv.used;
    g->vecs = g->scratch ? g->ops->alloc(dev, vv.used) : NULL;
    m->dev = g;
    if (!g->vecs) return model_release_device(m), -1;
    cv = (Carve){g->scratch, 0}, vv = (Carve){g->vecs, 0};
    carve_scratch(g, &m->cfg, m->max_context, &cv);
    carve_vectors(m, g, &vv, 1);
    if (keep_spine(m, g)) return model_release_device(m), -1;
    g->ops->keep(dev, &m->w.lm_head);
    if (make_cache(m, g, policy) || g->ops->get(dev, NULL, NULL, 0)) return model_release_device(m), -1;
    return 0;
}

int model_device_slots(const Model *m, int *holds_all) {
    *holds_all = m->dev && m->dev->n_slots && m->dev->all_kept;
    return m->dev ? m->dev->n_slots : -1;
}

void model_release_device(Model *m) {
    DevModel *g = m->dev;
    if (!g) return;
    if (g->n_slots) g->ops->expert_slots(g->dev, 0, 0), devcache_free(&g->cache);
    g->ops->release(g->dev, g->scratch, g->scratch_bytes);
    g->ops->release(g->dev, g->vecs, g->vec_bytes);
    free(g->layers);
    free(g->route_host);
    free(g);
    m->dev = NULL;
}

int devpass_takes(const Model *m, int n_seqs, int T) {
    return m->dev && n_seqs == 1 && T >= 1 && T <= MODEL_MAX_CHUNK && m->mla_cache == MLA_CACHE_LATENT;
}

int devpass_holds(const Model *m, const Mat *W) { return m->dev && m->dev->ops->holds(m->dev->dev, W); }

int devpass_spine_held(const Model *m) { return m->dev ? m->dev->layers_held : -1; }

/* ---- a State's device copy ---- */

void devpass_state_free(State *s) {
    DevState *ds = s->dev;
    const Model *m = s->model;
    if (!ds) return;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (!m->dev) break; /* (the device was given back first: its memory went with it) */
        m->dev->ops->release(m->dev->dev, ds->kda[l], kda_floats(&m->cfg) * sizeof(float));
        m->dev->ops->release(m->dev->dev, ds->latent[l], latent_width(&m->cfg) * (size_t)ds->cap * sizeof(float));
        m->dev->ops->release(m->dev->dev, ds->rec[l], record_floats(&m->cfg) * sizeof(float));
    }
    free(ds->kda), free(ds->latent), free(ds->rec), free(ds);
    s->dev = NULL;
}

void state_host_changed(State *s) { s->dev_stale = 1; }

int state_to_host(State *s) {
    const Model *m = s->model;
    if (!s->dev_newer) return 0;
    const DevModel *g = m->dev;
    if (!g) { /* the device was given back with the State's newest copy on it */
        s->dev_newer = 0, s->dev_stale = 1;
        return df_fail("the decode state was on the GPU, which is closed");
    }
    const K3Config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        LayerState *L = &s->layers[l];
        int rc = 0;
        if (c->layer_kind[l] == LAYER_KDA) {
            rc |= g->ops->get(g->dev, L->conv, s->dev->kda[l], conv_floats(c) * sizeof(float));
            rc |= g->ops->get(g->dev, L->S, s->dev->kda[l] + conv_floats(c), (kda_floats(c) - conv_floats(c)) * sizeof(float));
        } else
            rc |= g->ops->get(g->dev, L->latent, s->dev->latent[l], latent_width(c) * (size_t)s->len * sizeof(float));
        if (rc) return -1;
    }
    s->dev_newer = 0;
    ((Model *)m)->stats.state_syncs++; /* (statistics only) */
    return 0;
}

/* Makes the State's device copy current and able to hold T more positions. */
static int state_to_device(Model *m, State *s, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t KVW = latent_width(c);
    if (!s->dev) {
        s->dev = df_calloc(1, sizeof *s->dev);
        s->dev->kda = df_calloc((size_t)c->n_layers, sizeof(float *));
        s->dev->latent = df_calloc((size_t)c->n_layers, sizeof(float *));
        s->dev->rec = df_calloc((size_t)c->n_layers, sizeof(float *));
        for (int l = 0; l < c->n_layers; l++)
            if (c->layer_kind[l] == LAYER_KDA && !(s->dev->kda[l] = g->ops->alloc(g->dev, kda_floats(c) * sizeof(float))))
                return -1;
        s->dev_stale = 1;
    }
    DevState *ds = s->dev;
    if (ds->cap < s->len + T) { /* the host cache grew (state_reserve): grow alike, keeping the rows */
        for (int l = 0; l < c->n_layers; l++) {
            if (c->layer_kind[l] != LAYER_MLA) continue;
            float *grown = g->ops->alloc(g->dev, KVW * (size_t)s->cap * sizeof(float));
            if (!grown) return -1;
            if (ds->latent[l] && !s->dev_stale) g->ops->copy(g->dev, grown, ds->latent[l], KVW * (size_t)s->len * sizeof(float));
            g->ops->release(g->dev, ds->latent[l], KVW * (size_t)ds->cap * sizeof(float));
            ds->latent[l] = grown;
        }
        ds->cap = s->cap;
    }
    if (!s->dev_stale) return 0;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerState *L = &s->layers[l];
        if (c->layer_kind[l] == LAYER_KDA) {
            g->ops->put(g->dev, ds->kda[l], L->conv, conv_floats(c) * sizeof(float));
            g->ops->put(g->dev, ds->kda[l] + conv_floats(c), L->S, (kda_floats(c) - conv_floats(c)) * sizeof(float));
        } else if (s->len)
            g->ops->put(g->dev, ds->latent[l], L->latent, KVW * (size_t)s->len * sizeof(float));
    }
    s->dev_stale = 0;
    m->stats.state_syncs++;
    return 0;
}

int devpass_records(Model *m, State *s) {
    const K3Config *c = &m->cfg;
    if (!s->dev) return 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == LAYER_KDA && !s->dev->rec[l] &&
            !(s->dev->rec[l] = m->dev->ops->alloc(m->dev->dev, record_floats(c) * sizeof(float))))
            return 0;
    return 1;
}

/* ---- a forward of T rows ---- */

/* The KDA operation of layer l over `rows` rows of the recurrence's inputs (raw projections, decay
 * gate and beta pre-activations), advancing the windows and matrices at kda (conv, then S); its
 * outputs in the model's scratch. */
static DevKda kda_args(const Model *m, int l, float *kda, float *const *raw, const float *f, const float *beta_raw, int rows) {
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const DevLayer *D = &g->layers[l];
    DevKda a = {c->kda_heads, c->kda_head_dim, c->conv_kernel, rows, {raw[0], raw[1], raw[2]}, kda,
                {D->conv[0], D->conv[1], D->conv[2]}, {g->qkv[0], g->qkv[1], g->qkv[2]}, g->decay, g->beta, f,
                beta_raw, D->decay_rate, m->w.a_log_mode != ALOG_PER_HEAD, D->dt_bias, c->gate_lower_bound,
                kda + conv_floats(c), g->o};
    return a;
}

/* KDA of the chunk's T rows. A verify pass writes the projections the recurrence reads straight
 * into the State's records, after keeping there the windows and matrices it starts from. */
static void dev_kda(Model *m, const LayerWeights *L, int l, State *st, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const KdaWeights *w = &L->kda;
    const Mat *proj[3] = {&w->q, &w->k, &w->v};
    float *raw[3] = {g->raw[0], g->raw[1], g->raw[2]}, *f = g->f, *beta_raw = g->beta_raw;
    if (m->verifying) {
        Record r = record_at(c, st->dev->rec[l]);
        o->copy(d, r.conv, st->dev->kda[l], kda_floats(c) * sizeof(float)); /* windows, then S */
        for (int i = 0; i < 3; i++) raw[i] = r.raw[i];
        f = r.f, beta_raw = r.beta_raw;
    }
    for (int i = 0; i < 3; i++) o->mul(d, raw[i], proj[i], g->xn, T);
    o->mul(d, g->g, &w->g, g->xn, T);
    o->mul(d, g->fa, &w->f_a, g->xn, T);
    o->mul(d, f, &w->f_b, g->fa, T);
    o->mul(d, beta_raw, &w->b, g->xn, T);
    DevKda a = kda_args(m, l, st->dev->kda[l], raw, f, beta_raw, T);
    o->kda(d, &a);
    const int D = c->kda_head_dim;
    o->rmsnorm(d, g->o, g->o, g->layers[l].o_norm, D, c->kda_heads * T, (size_t)D, c->rms_eps, g->g);
    o->mul(d, g->attn_out, &w->o, g->o, T);
}

void devpass_commit(State *s, int n) {
    const Model *m = s->model;
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    if (!g || !s->dev || s->dev_stale) return; /* (the device is closed: the State went with it) */
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_KDA) continue;
        Record r = record_at(c, s->dev->rec[l]);
        g->ops->copy(g->dev, s->dev->kda[l], r.conv, kda_floats(c) * sizeof(float));
        DevKda a = kda_args(m, l, s->dev->kda[l], r.raw, r.f, r.beta_raw, n);
        g->ops->kda(g->dev, &a);
    }
    s->dev_newer = 1;
}

/* Latent attention of rows [0, T) after n cached positions, in launches of as many rows as the
 * scores scratch holds (row r sees n + r + 1 positions). */
static void dev_mla_attend(Model *m, State *st, int l, int n, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t NH = (size_t)c->mla_heads, R = (size_t)c->kv_lora, QK = (size_t)config_mla_qk_dim(c);
    for (int t0 = 0, rows; t0 < T; t0 += rows) {
        rows = T - t0;
        while (rows > 1 && (size_t)rows * (size_t)(n + t0 + rows) > (size_t)m->max_context) rows--;
        DevMla a = {c->mla_heads, c->kv_lora, c->qk_nope, c->qk_rope, n + t0 + 1, rows, g->qf + (size_t)t0 * NH * QK,
                    g->qlat + (size_t)t0 * NH * R, st->dev->latent[l], g->scores, g->lctx + (size_t)t0 * NH * R};
        g->ops->mla(g->dev, &a);
    }
}

/* MLA of the chunk's T rows: their latent rows appended to the cache, then causal attention. */
static void dev_mla(Model *m, const LayerWeights *L, int l, State *st, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const MlaWeights *w = &L->mla;
    const DevLayer *D = &g->layers[l];
    const int NH = c->mla_heads, V = c->v_head, R = c->kv_lora;
    const size_t KVW = latent_width(c);
    float *rows = st->dev->latent[l] + KVW * (size_t)st->len;
    o->mul(d, g->cq, &w->q_a, g->xn, T);
    o->rmsnorm(d, g->cq, g->cq, D->q_a_norm, c->q_lora, T, (size_t)c->q_lora, c->rms_eps, NULL);
    o->mul(d, g->qf, &w->q_b, g->cq, T);
    o->mul(d, g->ckv, &w->kv_a, g->xn, T);
    /* the new cache rows: c normalised in place, k_pe raw */
    o->copy(d, rows, g->ckv, sizeof(float) * KVW * (size_t)T);
    o->rmsnorm(d, rows, rows, D->kv_a_norm, R, T, KVW, c->rms_eps, NULL);
    o->mul(d, g->g, &w->g, g->xn, T);
    const MatHeads keys = {NH, 0, c->qk_nope + V, c->qk_nope, config_mla_qk_dim(c)};
    const MatHeads values = {NH, c->qk_nope, c->qk_nope + V, V, R};
    o->tmul_heads(d, g->qlat, &w->kv_b, &keys, g->qf, T);
    dev_mla_attend(m, st, l, st->len, T);
    o->mul_heads(d, g->att, &w->kv_b, &values, g->lctx, T);
    o->gate(d, g->att, g->g, (size_t)T * NH * V);
    o->mul(d, g->attn_out, &w->o, g->att, T);
}

/* x = AttnRes over (anchors, P) with query q for rows [row0, row0 + T) (x from its row 0); with no
 * anchors, x = P. */
static void dev_attnres(Model *m, int n_anchors, const float *q, int row0, int T, float *x) {
    DevModel *g = m->dev;
    const size_t H = (size_t)m->cfg.hidden;
    const float *P = g->P + (size_t)row0 * H;
    if (n_anchors == 0) g->ops->copy(g->dev, x, P, (size_t)T * H * sizeof(float));
    else
        g->ops->attnres(g->dev, x, g->anchors + (size_t)row0 * H, n_anchors, MODEL_MAX_CHUNK * H, P, q, (int)H, T,
                        m->cfg.rms_eps, g->res_scores);
}

static int dev_attention(Model *m, State *st, int l, int n_anchors, int T) {
    DevModel *g = m->dev;
    const DevLayer *D = &g->layers[l];
    const size_t H = (size_t)m->cfg.hidden, HT = H * (size_t)T;
    g->ops->mark(g->dev, DEV_PHASE_ATTENTION);
    dev_attnres(m, n_anchors, D->attn_res_q, 0, T, g->xn);
    int boundary = l % m->cfg.attn_res_block == 0;
    if (boundary) g->ops->copy(g->dev, g->anchors + (size_t)n_anchors++ * MODEL_MAX_CHUNK * H, g->P, HT * sizeof(float));
    g->ops->rmsnorm(g->dev, g->xn, g->xn, D->attn_norm, (int)H, T, H, m->cfg.rms_eps, NULL);
    if (m->w.layers[l].kind == LAYER_MLA) dev_mla(m, &m->w.layers[l], l, st, T);
    else dev_kda(m, &m->w.layers[l], l, st, T);
    if (boundary) g->ops->copy(g->dev, g->P, g->attn_out, HT * sizeof(float));
    else g->ops->add(g->dev, g->P, g->attn_out, HT);
    return n_anchors;
}

static void dev_mlp(Model *m, const MlpWeights *w, int width, const float *u, int T, float *out) {
    DevModel *g = m->dev;
    g->ops->mul(g->dev, g->h1, &w->gate, u, T);
    g->ops->mul(g->dev, g->h3, &w->up, u, T);
    g->ops->situ(g->dev, g->h1, g->h3, (size_t)T * width, m->cfg.situ_beta, m->cfg.situ_linear_beta);
    g->ops->mul(g->dev, out, &w->down, g->h1, T);
}

/* The layer's routing of T rows, brought to the host in one copy (the expert source sees it, and
 * may replace it). */
static int dev_route(Model *m, const LayerWeights *L, int layer, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t TK = (size_t)T * c->top_k;
    Scratch *s = &m->s;
    int *ids = (int *)g->route_out;
    float *wts = g->route_out + TK;
    g->ops->mul(g->dev, g->router, &L->moe_w.router, g->x, T);
    g->ops->route(g->dev, g->router, g->layers[layer].score_bias, c->n_experts, c->top_k, T, ids, wts);
    if (g->ops->get(g->dev, g->route_host, g->route_out, 2 * TK * sizeof(float))) return -1;
    memcpy(s->sel, g->route_host, TK * sizeof(int));
    memcpy(s->sel_w, g->route_host + TK, TK * sizeof(float));
    if (m->experts->replace) {
        m->experts->replace(m->experts, layer, m->chunk_pos, s->sel, s->sel_w, T, c->top_k);
        memcpy(g->route_host, s->sel, TK * sizeof(int));
        memcpy(g->route_host + TK, s->sel_w, TK * sizeof(float));
        g->ops->put(g->dev, g->route_out, g->route_host, 2 * TK * sizeof(float));
    }
    if (m->experts->route) {
        double t0 = df_now();
        m->experts->route(m->experts, layer, s->sel, T, c->top_k);
        m->stats.route_s += df_now() - t0;
    }
    /* the lookahead reads this layer's FFN input on the host only when the source takes guesses */
    if (m->experts->predict && g->ops->get(g->dev, s->x, g->x, sizeof(float) * (size_t)c->hidden * T)) return -1;
    lookahead(m, layer, s->x, T);
    return 0;
}

/* How many of n misses go to the CPU threads (the rest are copied): as told, or as measured (AUTO):
 * first each way alone a few times, for its seconds per expert; then, when copies can run while
 * the CPU computes (concurrent: into the cache, on the copy stream; or from in-place memory), the
 * split that should make both finish together, else the cheaper way for all; every 64th batch
 * with misses measures each way alone again. */
static int cpu_share(DevModel *g, int n, int concurrent) {
    if (g->way != HOST_EXPERTS_AUTO) return g->way == HOST_EXPERTS_CPU ? n : 0;
    if (n == 0) return 0;
    g->decisions++;
    if (g->samples[0] < 4 || g->decisions % 64 == 0) return 0;
    if (g->samples[1] < 4 || g->decisions % 64 == 32) return n;
    if (!concurrent) return g->cost[1] < g->cost[0] ? n : 0;
    return (int)(n * g->cost[0] / (g->cost[0] + g->cost[1]) + 0.5);
}

static void note_cost(DevModel *g, int cpu, double secs, int n) {
    double per = secs / n;
    g->cost[cpu] = g->samples[cpu] ? 0.8 * g->cost[cpu] + 0.2 * per : per;
    g->samples[cpu] += n;
}

/* One expert on the CPU threads (their kernels, not the device's) on `rows` rows of its input on the
 * host (x), its outputs sent to out on the device. */
static void cpu_expert(Model *m, const ExpertMats *w, const float *x, int rows, float *out) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    mat_mul_cpu(m->pool, s->ex_h1, &w->w1, x, rows);
    mat_mul_cpu(m->pool, s->ex_h3, &w->w3, x, rows);
    for (size_t i = 0; i < (size_t)rows * c->moe_inter; i++)
        s->ex_h1[i] = op_situ(s->ex_h1[i], s->ex_h3[i], c->situ_beta, c->situ_linear_beta);
    mat_mul_cpu(m->pool, s->ex_out, &w->w2, s->ex_h1, rows);
    g->ops->put(g->dev, out, s->ex_out, sizeof(float) * (size_t)rows * c->latent);
}

/* The misses miss[0..n) (indices into the batch), those the policy ranks likeliest to be used again
 * first (stable). */
static void rank_misses(const DevModel *g, const int *ids, int *miss, int n) {
    if (!g->n_slots) return;
    for (int i = 1; i < n; i++) {
        int v = miss[i], at = i;
        double h = devcache_heat(&g->cache, ids[v]);
        while (at > 0 && devcache_heat(&g->cache, ids[miss[at - 1]]) < h) miss[at] = miss[at - 1], at--;
        miss[at] = v;
    }
}

/* Copies batch expert i into a slot of the cache (-1: no slot free; it is then copied for the one
 * use); returns the slot. */
static int admit(DevModel *g, const ExpertMats *w, int id) {
    int slot = g->n_slots ? devcache_admit(&g->cache, id, &w->w1.key) : -1;
    if (slot >= 0) g->ops->slot_fill(g->dev, slot, &w->w1, &w->w2, &w->w3);
    return slot;
}

/* How each of n acquired experts (mats[i] is expert ids[i]) runs, way[i]: 0 a hit of the cache, 1
 * copied (admitted into the cache, or for this use when it has no slot free), 2 on the CPU threads
 * (only when hybrid: cpu_share says how many of the misses, and those the policy ranks lowest go;
 * in CPU mode each is also copied into the cache in the background); where[i] the expert's cache
 * slot or -1; the counts in *n_copy and *n_cpu. Returns how many slot fills it queued. */
static int expert_ways(Model *m, const ExpertMats *mats, const int *ids, int n, int hybrid, int *way, int *where,
                       int *n_copy, int *n_cpu) {
    DevModel *g = m->dev;
    int miss[MODEL_MAX_ROUTED], n_miss = 0, fills = 0;
    for (int i = 0; i < n; i++) {
        where[i] = g->n_slots ? devcache_find(&g->cache, ids[i], &mats[i].w1.key) : -1;
        way[i] = where[i] >= 0 ? 0 : 1;
        if (where[i] < 0) miss[n_miss++] = i;
    }
    rank_misses(g, ids, miss, n_miss);
    *n_cpu = hybrid ? cpu_share(g, n_miss, m->experts->in_place || g->n_slots) : 0;
    *n_copy = n_miss - *n_cpu;
    for (int h = 0; h < n_miss; h++) {
        const int i = miss[h];
        if (h >= *n_copy) way[i] = 2;
        if (way[i] == 1 || g->way == HOST_EXPERTS_CPU) fills += (where[i] = admit(g, &mats[i], ids[i])) >= 0;
    }
    return fills;
}

/* After a batch's launches and CPU experts (begun at t0): with measure, the seconds per expert of
 * the way that ran alone; the cache's uses; from a source whose memory changes (not in_place) the
 * slot fills waited for, before the next acquire refills that memory; the counts. */
static int ways_done(Model *m, const int *ids, int n, double t0, int n_copy, int n_cpu, int fills, int measure) {
    DevModel *g = m->dev;
    if (measure && n_cpu && !n_copy) note_cost(g, 1, df_now() - t0, n_cpu);
    if (measure && n_copy && !n_cpu) { /* the copies alone: until they are done */
        if (g->ops->get(g->dev, NULL, NULL, 0)) return -1;
        note_cost(g, 0, df_now() - t0, n_copy);
    }
    for (int i = 0; g->n_slots && i < n; i++) devcache_use(&g->cache, ids[i]);
    if (fills && !m->experts->in_place && g->ops->fills_wait(g->dev)) return -1;
    m->stats.experts_cpu += (uint64_t)n_cpu, m->stats.experts_copied += (uint64_t)n_copy;
    return 0;
}

/* Runs one acquired batch of a layer's experts (expert ids[i] writing slot slots[i] of eo): the
 * cache's hits in one launch; the misses to copy, admitted into the cache (their copies run on the
 * copy stream while the compute stream works through what was queued before, the hits' launch
 * included), in a second launch that waits for them; the rest on the CPU threads. */
static int run_batch(Model *m, const ExpertMats *mats, const int *ids, const int *slots, int n, int hybrid) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const Mat *w1[2][K3_MAX_TOP_K], *w2[2][K3_MAX_TOP_K], *w3[2][K3_MAX_TOP_K];
    int slot[2][K3_MAX_TOP_K], dslot[2][K3_MAX_TOP_K], nk[2] = {0, 0}, way[K3_MAX_TOP_K], where[K3_MAX_TOP_K];
    int n_copy, n_cpu, fills = expert_ways(m, mats, ids, n, hybrid, way, where, &n_copy, &n_cpu);
    for (int i = 0; i < n; i++) {
        if (way[i] == 2) continue;
        int b = way[i], k = nk[b]++;
        w1[b][k] = &mats[i].w1, w2[b][k] = &mats[i].w2, w3[b][k] = &mats[i].w3, slot[b][k] = slots[i], dslot[b][k] = where[i];
    }
    double t0 = df_now();
    for (int b = 0; b < 2; b++)
        if (nk[b])
            g->ops->experts(g->dev, w1[b], w2[b], w3[b], slot[b], dslot[b], nk[b], g->z, g->eh, g->eo, c->situ_beta,
                            c->situ_linear_beta, !m->experts->in_place);
    for (int i = 0; i < n; i++)
        if (way[i] == 2) cpu_expert(m, &mats[i], m->s.z, 1, g->eo + (size_t)slots[i] * c->latent);
    return ways_done(m, ids, n, t0, n_copy, n_cpu, fills, 1);
}

/* A chunk's routed experts by expert: the distinct ones ascending (ids), expert j on the gathered
 * rows [at[j], at[j] + rows[j]); gathered row r holds z row src[r]. */
typedef struct {
    int ids[MODEL_MAX_ROUTED], at[MODEL_MAX_ROUTED], rows[MODEL_MAX_ROUTED], src[MODEL_MAX_ROUTED];
    int n;
} Gathered;

static int expert_index(const Gathered *gr, int e) {
    int lo = 0, hi = gr->n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (gr->ids[mid] < e) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Lays the chunk's T rows out by expert (each expert's rows in row order, as moe.c runs them), sends
 * the layout up and gathers z's rows into xi: the gathered row of selection (t, i) is what the
 * experts' outputs are gathered back from, into eo[t][i]. */
static void gather_inputs(Model *m, int T, Gathered *gr) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const int TK = T * c->top_k;
    int *idx = (int *)(void *)g->route_host, fill[MODEL_MAX_ROUTED]; /* (the routing is in m->s by now) */
    for (int j = 0; j < gr->n; j++) gr->rows[j] = 0;
    for (int p = 0; p < TK; p++) gr->rows[expert_index(gr, m->s.sel[p])]++;
    for (int j = 0, at = 0; j < gr->n; at += gr->rows[j++]) gr->at[j] = fill[j] = at;
    for (int p = 0; p < TK; p++) { /* p = t * top_k + i: rows in order */
        int r = fill[expert_index(gr, m->s.sel[p])]++;
        gr->src[r] = idx[r] = p / c->top_k;
        idx[TK + p] = r;
    }
    g->ops->put(g->dev, g->gather_idx, idx, 2 * (size_t)TK * sizeof(int));
    g->ops->gather(g->dev, g->xi, g->z, g->gather_idx, TK, c->latent);
}

/* Runs one acquired batch of a chunk's experts (mats[i] is expert ids[i]) on their gathered rows:
 * as run_batch, the held ones and those to copy each in launches of experts with equal rows, then
 * those for the CPU threads. */
static int run_batch_rows(Model *m, const ExpertMats *mats, const int *ids, int n, const Gathered *gr, int T, int hybrid) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    const Mat *w1[MODEL_MAX_ROUTED], *w2[MODEL_MAX_ROUTED], *w3[MODEL_MAX_ROUTED];
    int way[MODEL_MAX_ROUTED], where[MODEL_MAX_ROUTED], dslot[MODEL_MAX_ROUTED], at[MODEL_MAX_ROUTED];
    int rows[MODEL_MAX_ROUTED], j[MODEL_MAX_ROUTED], n_copy, n_cpu;
    for (int i = 0; i < n; i++) j[i] = expert_index(gr, ids[i]);
    int fills = expert_ways(m, mats, ids, n, hybrid, way, where, &n_copy, &n_cpu); /* 0 hit, 1 copied, 2 on the CPU */
    double t0 = df_now();
    for (int b = 0; b < 2; b++) {
        int k = 0;
        for (int r = 1; r <= T; r++) /* grouped by row count */
            for (int i = 0; i < n; i++)
                if (way[i] == b && gr->rows[j[i]] == r)
                    w1[k] = &mats[i].w1, w2[k] = &mats[i].w2, w3[k] = &mats[i].w3, dslot[k] = where[i],
                    at[k] = gr->at[j[i]], rows[k++] = r;
        if (k)
            g->ops->experts_rows(g->dev, w1, w2, w3, dslot, at, rows, k, g->xi, g->eh, T * c->top_k, g->xo, c->situ_beta,
                                 c->situ_linear_beta, !m->experts->in_place);
    }
    for (int i = 0; i < n; i++) {
        if (way[i] != 2) continue;
        const int a = gr->at[j[i]], r = gr->rows[j[i]];
        for (int q = 0; q < r; q++)
            memcpy(s->ex_in + (size_t)q * c->latent, s->z + (size_t)gr->src[a + q] * c->latent, sizeof(float) * (size_t)c->latent);
        cpu_expert(m, &mats[i], s->ex_in, r, g->xo + (size_t)a * c->latent);
    }
    return ways_done(m, ids, n, t0, n_copy, n_cpu, fills, 0); /* (the seconds per expert are a decode step's) */
}

/* The T rows' experts, acquired from the source in its batches, each distinct expert once: for one
 * row, expert i of the selection writes slot i of eo; for a chunk, the gathered rows (above). */
static int dev_routed(Model *m, int layer, int T, int hybrid) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    ExpertSource *src = m->experts;
    const int K = c->top_k;
    Gathered gr;
    int ids[MODEL_MAX_ROUTED], slot[K3_MAX_TOP_K];
    ExpertMats mats[MODEL_MAX_ROUTED];
    const int n = moe_distinct_experts(m, T, ids); /* ascending, as the host pass acquires them */
    if (T > 1) {
        memcpy(gr.ids, ids, sizeof(int) * (size_t)n), gr.n = n;
        gather_inputs(m, T, &gr);
    }
    const int batch = src->max_batch > 0 ? src->max_batch : n;
    int waited = 0;
    if (m->dev->n_slots) devcache_layer(&m->dev->cache, layer);
    for (int at = 0; at < n; at += batch) {
        int count = n - at < batch ? n - at : batch;
        int ready = src->ready_first ? src->ready_first(src, layer, ids + at, n - at) : 1;
        double t0 = df_now();
        if (src->acquire(src, layer, ids + at, count, mats)) return -1;
        double wait = df_now() - t0;
        m->stats.expert_wait_s += wait;
        if (!ready && !waited) m->stats.first_wait_s += wait, waited = 1;
        if (T == 1)
            for (int i = 0; i < count; i++)
                for (int k = 0; k < K; k++)
                    if (m->s.sel[k] == ids[at + i]) slot[i] = k;
        if (T == 1 ? run_batch(m, mats, ids + at, slot, count, hybrid) : run_batch_rows(m, mats, ids + at, count, &gr, T, hybrid))
            return -1;
    }
    if (T > 1) g->ops->gather(g->dev, g->eo, g->xo, g->gather_idx + T * K, T * K, c->latent);
    m->stats.expert_bytes += (uint64_t)n * m->cat->expert_bytes;
    return 0;
}

static int dev_moe(Model *m, const LayerWeights *L, int layer, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const MoeWeights *w = &L->moe_w;
    if (dev_route(m, L, layer, T)) return -1;
    g->ops->mul(g->dev, g->z, &w->latent_down, g->x, T);
    /* experts the device may not hold can run on the CPU: z comes up before the shared experts are
     * queued, so that the CPU computes while the device does */
    const int hybrid = !g->all_kept && g->way != HOST_EXPERTS_COPY;
    if (hybrid && g->ops->get(g->dev, m->s.z, g->z, sizeof(float) * (size_t)T * c->latent)) return -1;
    if (c->n_shared > 0) dev_mlp(m, &w->shared, c->shared_inter, g->x, T, g->xn);
    g->ops->mark(g->dev, DEV_PHASE_EXPERTS);
    if (dev_routed(m, layer, T, hybrid)) return -1;
    g->ops->mark(g->dev, DEV_PHASE_FFN);
    g->ops->combine(g->dev, g->y, g->eo, g->route_out + (size_t)T * c->top_k, c->top_k, c->latent, T);
    g->ops->rmsnorm(g->dev, g->y, g->y, g->layers[layer].latent_norm, c->latent, T, (size_t)c->latent, c->rms_eps, NULL);
    g->ops->mul(g->dev, g->ffn_out, &w->latent_up, g->y, T);
    if (c->n_shared > 0) g->ops->add(g->dev, g->ffn_out, g->xn, (size_t)T * c->hidden);
    return 0;
}

static int dev_ffn(Model *m, int l, int n_anchors, int T) {
    DevModel *g = m->dev;
    const LayerWeights *L = &m->w.layers[l];
    const size_t H = (size_t)m->cfg.hidden;
    g->ops->mark(g->dev, DEV_PHASE_FFN);
    dev_attnres(m, n_anchors, g->layers[l].ffn_res_q, 0, T, g->x);
    g->ops->rmsnorm(g->dev, g->x, g->x, g->layers[l].ffn_norm, (int)H, T, H, m->cfg.rms_eps, NULL);
    if (L->moe) {
        if (dev_moe(m, L, l, T)) return -1;
    } else
        dev_mlp(m, &L->dense, m->cfg.dense_inter, g->x, T, g->ffn_out);
    g->ops->add(g->dev, g->P, g->ffn_out, H * (size_t)T);
    return 0;
}

/* The GPU-timeline phases of the pass into the model's stats. */
static void add_phase_times(Model *m) {
    double secs[DEV_N_PHASES] = {0};
    m->dev->ops->phase_times(m->dev->dev, secs);
    m->stats.attention_s += secs[DEV_PHASE_ATTENTION];
    m->stats.ffn_s += secs[DEV_PHASE_FFN] + secs[DEV_PHASE_EXPERTS];
    m->stats.experts_s += secs[DEV_PHASE_EXPERTS];
    m->stats.head_s += secs[DEV_PHASE_HEAD];
}

int devpass_forward(Model *m, State *st, const int *tokens, int T, int row0, int n_out, float *logits) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    if (state_to_device(m, st, T)) return -1;
    st->dev_newer = 1; /* from here on the device's copy is the State */
    st->dev_verify = m->verifying;
    mat_gather_rows(&m->w.embed, tokens, T, m->s.P);
    g->ops->put(g->dev, g->P, m->s.P, sizeof(float) * H * (size_t)T);
    m->look_layer = -1;
    m->chunk_pos = st->len;
    int n_anchors = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const int read = !holds_layer(g, &m->w.layers[l]); /* a streamed layer the device lacks */
        if (read && model_acquire_layer(m, l)) return -1;
        n_anchors = dev_attention(m, st, l, n_anchors, T);
        int rc = dev_ffn(m, l, n_anchors, T);
        if (read && m->spine->release_layer) m->spine->release_layer(m->spine, l);
        if (rc) return -1;
    }
    st->len += T;
    m->stats.positions += (uint64_t)T;
    m->stats.forwards++;
    m->stats.dev_forwards++;
    if (logits) { /* the tail of the rows asked for only: each row's is its own */
        g->ops->mark(g->dev, DEV_PHASE_HEAD);
        dev_attnres(m, n_anchors, g->out_res_q, row0, n_out, g->x);
        g->ops->rmsnorm(g->dev, g->x, g->x, g->final_norm, c->hidden, n_out, H, c->rms_eps, NULL);
        g->ops->mul(g->dev, g->logits, &m->w.lm_head, g->x, n_out);
    }
    g->ops->mark(g->dev, DEV_PHASE_IDLE);
    int rc = g->ops->get(g->dev, logits, g->logits, logits ? sizeof(float) * (size_t)n_out * c->vocab : 0);
    add_phase_times(m);
    if (rc || !logits) return rc ? -1 : 0;
    int rows[MODEL_MAX_CHUNK];
    for (int i = 0; i < n_out; i++) rows[i] = row0 + i;
    return model_check_logits(m, logits, rows, n_out);
}

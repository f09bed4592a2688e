/* devmem.c - the model's memory on its device: the Model's (its scratch of a window of rows of
 * every activation, a device copy of its small vectors, the spine's matrices kept under their
 * residency keys, the expert cache's slots), made by devmem_open for the CPU device at model_create
 * and for an accelerator by model_use_device; and each State's device copy (DevState: its KDA
 * windows and matrices, its MLA cache, a verify pass's replay records), made at its first pass. On
 * the CPU device a State's copy is its own arrays; an accelerator's copy is brought back whenever
 * the host reads the State (state_to_host) and sent up again after the host wrote it
 * (state_host_changed). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_device.h"
#include "model/internal.h"
#include "util/clock.h"
#include "util/err.h"

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

enum { MLP_ROWS = 512, ATTN_ROWS = 512 };

/* The scratch for passes of up to `rows` rows. What lives through a whole pass: the residual
 * stream and AttnRes anchors, the routing, the gather indices, the logits of up to
 * MODEL_LOGIT_ROWS rows (the head runs in groups of that many). A layer's attention buffers and
 * its FFN's share their memory (the attention is done before the FFN starts): each region starts
 * where the other does. A layer's attention runs in groups of at most ATTN_ROWS rows (its buffers
 * hold one group), the dense and shared-expert MLPs in groups of at most MLP_ROWS rows,
 * and the routed experts' hidden activations (eh) hold at least one expert's rows of the pass
 * (launches are split to fit). The MLA scores hold one row's heads over the whole context (a
 * pass's rows take turns when they do not fit together); kvf, the expanded MLA cache's expansion
 * of the rows' latents, only for that layout. */
static void carve_scratch(DevModel *g, const K3Config *c, MlaCacheMode mla, int max_context, int rows, Carve *cv) {
    const size_t H = (size_t)c->hidden, W = (size_t)config_kda_width(c), NH = (size_t)c->mla_heads;
    const size_t ffn = c->dense_inter > c->shared_inter ? (size_t)c->dense_inter : (size_t)c->shared_inter;
    const size_t R = (size_t)rows, RK = R * (size_t)c->top_k;
    g->rows = rows;
    g->mlp_rows = rows < MLP_ROWS ? rows : MLP_ROWS;
    g->eh_rows = RK < MODEL_BATCH_ROWS * (size_t)c->top_k ? (int)RK : rows > MODEL_BATCH_ROWS * c->top_k ? rows : MODEL_BATCH_ROWS * c->top_k;
    g->logit_rows = rows < MODEL_LOGIT_ROWS ? rows : MODEL_LOGIT_ROWS;
    g->attn_rows = rows < ATTN_ROWS ? rows : ATTN_ROWS;
    const size_t A = (size_t)g->attn_rows;
    g->P = carve(cv, R * H), g->x = carve(cv, R * H), g->xn = carve(cv, R * H), g->ffn_out = carve(cv, R * H);
    g->anchors = carve(cv, R * H * (size_t)max_anchors(c)), g->res_scores = carve(cv, R * ((size_t)max_anchors(c) + 1));
    g->route_out = carve(cv, 2 * RK), g->gather_idx = (int *)carve(cv, 2 * (size_t)g->eh_rows);
    g->logits = carve(cv, (size_t)g->logit_rows * c->vocab);
    g->scores = carve(cv, NH * (size_t)max_context);
    const size_t shared = cv->used; /* the attention region (A rows), then the FFN region from the same place */
    g->attn_out = carve(cv, A * H);
    for (int i = 0; i < 3; i++) g->raw[i] = carve(cv, A * W), g->qkv[i] = carve(cv, A * W);
    g->g = carve(cv, A * (W > NH * c->v_head ? W : NH * c->v_head));
    g->fa = carve(cv, A * c->kda_head_dim), g->f = carve(cv, A * W), g->beta_raw = carve(cv, A * c->kda_heads);
    g->decay = carve(cv, A * W), g->beta = carve(cv, A * c->kda_heads), g->o = carve(cv, A * W);
    g->cq = carve(cv, A * (size_t)(c->q_lora > c->kv_lora ? c->q_lora : c->kv_lora));
    g->qf = carve(cv, A * NH * (size_t)config_mla_qk_dim(c)), g->ckv = carve(cv, A * latent_width(c));
    g->qlat = carve(cv, A * NH * c->kv_lora), g->lctx = carve(cv, A * NH * c->kv_lora), g->att = carve(cv, A * NH * c->v_head);
    g->kvf = mla == MLA_CACHE_EXPANDED ? carve(cv, A * NH * (size_t)(c->qk_nope + c->v_head)) : NULL;
    const size_t attention_end = cv->used;
    cv->used = shared;
    g->h1 = carve(cv, (size_t)g->mlp_rows * ffn), g->h3 = carve(cv, (size_t)g->mlp_rows * ffn);
    g->router = carve(cv, R * c->n_experts), g->z = carve(cv, R * c->latent), g->y = carve(cv, R * c->latent);
    g->eo = carve(cv, RK * c->latent), g->eh = carve(cv, 2 * (size_t)g->eh_rows * c->moe_inter);
    g->xi = carve(cv, (size_t)g->eh_rows * c->latent), g->xo = carve(cv, (size_t)g->eh_rows * c->latent);
    if (cv->used < attention_end) cv->used = attention_end;
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

/* ---- the spine layers a pass reads, and recordings ---- */

/* With a streamed spine, layer l's bytes may sit in a different buffer, or be other bytes, on
 * every pass: its Mats (and their residency keys) are asked for again. */
int model_acquire_layer(Model *m, int l) {
    if (!m->spine->acquire_layer) return 0;
    double t0 = df_now();
    int moved = m->spine->acquire_layer(m->spine, l);
    m->stats.spine_wait_s += df_now() - t0;
    if (moved < 0) return -1;
    if (moved && weights_bind_layer_mats(&m->w, m->cat, l, m->spine)) {
        m->spine->release_layer(m->spine, l);
        return -1;
    }
    return 0;
}

/* Records what is queued from here to the next wait, when the pass may be recorded. */
void record_stretch(Model *m) {
    DevModel *g = m->dev;
    if (!g->recordable) return;
    if (g->dev->graphs) g->ops->mark(g->dev, DEV_PHASE_IDLE);
    m->stats.dev_graphs += (uint64_t)g->ops->record(g->dev, g->n_recorded++);
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
    int *ids = m->s.routed.order;
    ExpertMats *mats = m->s.routed.mats; /* (both hold every expert of a layer) */
    const int batch = src->max_batch > 0 && src->max_batch < c->n_experts ? src->max_batch : c->n_experts;
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

uint64_t devmem_scratch_bytes(const K3Config *c, MlaCacheMode mla, int max_context, int rows) {
    DevModel g;
    Carve cv = {NULL, 0};
    carve_scratch(&g, c, mla, max_context, rows, &cv);
    return cv.used;
}

static int dims_supported(const K3Config *c) {
    return c->n_experts <= 8192 && c->top_k <= K3_MAX_TOP_K && c->kda_head_dim <= 1024;
}

int devmem_open(Model *m, MatDevice *dev, HostExperts way, CachePolicy policy) {
    devmem_close(m);
    DevModel *g = df_calloc(1, sizeof *g);
    g->dev = dev, g->ops = dev->ops, g->host = dev->host_memory, g->way = way;
    g->layers = df_calloc((size_t)m->cfg.n_layers, sizeof *g->layers);
    g->route_host = df_malloc(2 * sizeof(float) * (size_t)m->max_rows * (size_t)m->cfg.top_k);
    Carve cv = {NULL, 0};
    carve_scratch(g, &m->cfg, m->mla_cache, m->max_context, m->max_rows, &cv);
    g->scratch_bytes = cv.used;
    g->scratch = g->ops->alloc(dev, cv.used);
    Carve vv = {NULL, 0};
    carve_vectors(m, g, &vv, 0);
    g->vec_bytes = vv.used;
    g->vecs = g->scratch ? g->ops->alloc(dev, vv.used) : NULL;
    m->dev = g;
    if (!g->vecs) return devmem_close(m), -1;
    cv = (Carve){g->scratch, 0}, vv = (Carve){g->vecs, 0};
    carve_scratch(g, &m->cfg, m->mla_cache, m->max_context, m->max_rows, &cv);
    carve_vectors(m, g, &vv, 1);
    if (g->host) return 0; /* the CPU reads every weight where its store put it: nothing to keep */
    if (keep_spine(m, g)) return devmem_close(m), -1;
    g->whole_spine = g->ops->keep(dev, &m->w.lm_head) && g->layers_held == m->cfg.n_layers;
    if (make_cache(m, g, policy) || g->ops->get(dev, NULL, NULL, 0)) return devmem_close(m), -1;
    return 0;
}

void devmem_close(Model *m) {
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

int model_use_device(Model *m, HostExperts way, CachePolicy policy) {
    MatDevice *dev = device_current();
    if (!dev || !dev->ops || !m->dev->host || !dims_supported(&m->cfg)) return 0;
    if (m->mla_cache == MLA_CACHE_EXPANDED && !dev->ops->mla_expanded) return 0; /* (its products still run there) */
    if (!m->helper) m->helper = cpu_device_create(m->pool, CPU_PRODUCTS_CPU);
    scratch_alloc(&m->s, &m->cfg, m->max_rows, 1); /* the helper's buffers */
    if (devmem_open(m, dev, way, policy) == 0) return 0;
    devmem_open(m, m->cpu, HOST_EXPERTS_COPY, policy); /* (cannot fail: host memory) */
    return -1;
}

void model_release_device(Model *m) {
    if (!m->dev || m->dev->host) return;
    devmem_open(m, m->cpu, HOST_EXPERTS_COPY, POLICY_CRF);
}

int model_device_slots(const Model *m, int *holds_all) {
    *holds_all = !m->dev->host && m->dev->n_slots && m->dev->all_kept;
    return m->dev->host ? -1 : m->dev->n_slots;
}

int devmem_holds(const Model *m, const Mat *W) { return m->dev->ops->holds(m->dev->dev, W); }

int model_spine_held(const Model *m) { return m->dev->host ? -1 : m->dev->layers_held; }

int devmem_layer_held(const Model *m, int l) { return !m->dev->host && holds_layer(m->dev, &m->w.layers[l]); }

/* ---- a State's device copy ---- */

/* The per-layer arrays of a DevState, in the order devmem_state_free releases them. */
static float ***state_arrays(DevState *ds, int i) {
    float ***arr[5] = {&ds->kda, &ds->latent, &ds->keys, &ds->values, &ds->rec};
    return arr[i];
}

void devmem_state_free(State *s) {
    DevState *ds = s->dev;
    const Model *m = s->model;
    if (!ds) return;
    const K3Config *c = &m->cfg;
    for (int l = 0; ds->on == m->dev->dev && l < c->n_layers; l++) { /* (else its memory went with its device) */
        const DevModel *g = m->dev;
        if (!g->host) {
            g->ops->release(g->dev, ds->kda[l], kda_floats(c) * sizeof(float));
            g->ops->release(g->dev, ds->latent[l], latent_width(c) * (size_t)ds->cap * sizeof(float));
        }
        g->ops->release(g->dev, ds->rec[l], record_floats(c) * sizeof(float));
    }
    for (int i = 0; i < 5; i++) free(*state_arrays(ds, i));
    free(ds);
    s->dev = NULL;
}

void state_host_changed(State *s) { s->dev_stale = 1; }

int state_to_host(State *s) {
    const Model *m = s->model;
    if (!s->dev_newer) return 0;
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    if (s->dev->on != g->dev) { /* the device was given back with the State's newest copy on it */
        s->dev_newer = 0, s->dev_stale = 1;
        return df_fail("the decode state was on the GPU, which is closed");
    }
    for (int l = 0; l < c->n_layers; l++) {
        LayerState *L = &s->layers[l];
        int rc = 0;
        if (c->layer_kind[l] == LAYER_KDA) rc = g->ops->get(g->dev, L->kda, s->dev->kda[l], kda_floats(c) * sizeof(float));
        else rc = g->ops->get(g->dev, L->latent, s->dev->latent[l], latent_width(c) * (size_t)s->len * sizeof(float));
        if (rc) return -1;
    }
    s->dev_newer = 0;
    ((Model *)m)->stats.state_syncs++; /* (statistics only) */
    return 0;
}

/* The CPU device's copy of a State is its arrays (which state_reserve may have moved). */
static void point_at_arrays(State *s) {
    const K3Config *c = &s->model->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerState *L = &s->layers[l];
        s->dev->kda[l] = L->kda, s->dev->latent[l] = L->latent, s->dev->keys[l] = L->keys, s->dev->values[l] = L->values;
    }
    s->dev->cap = s->cap, s->dev_stale = 0;
}

/* An accelerator's copy able to hold T more positions: its MLA caches grown alike when the host's
 * grew (state_reserve), keeping their rows. */
static int grow_copy(Model *m, State *s, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t KVW = latent_width(c);
    DevState *ds = s->dev;
    if (ds->cap >= s->len + T) return 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_MLA) continue;
        float *grown = g->ops->alloc(g->dev, KVW * (size_t)s->cap * sizeof(float));
        if (!grown) return -1;
        if (ds->latent[l] && !s->dev_stale) g->ops->copy(g->dev, grown, ds->latent[l], KVW * (size_t)s->len * sizeof(float));
        g->ops->release(g->dev, ds->latent[l], KVW * (size_t)ds->cap * sizeof(float));
        ds->latent[l] = grown;
    }
    ds->cap = s->cap;
    return 0;
}

/* An accelerator's copy made current from the host's arrays. */
static void send_up(Model *m, State *s) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerState *L = &s->layers[l];
        if (c->layer_kind[l] == LAYER_KDA) g->ops->put(g->dev, s->dev->kda[l], L->kda, kda_floats(c) * sizeof(float));
        else if (s->len)
            g->ops->put(g->dev, s->dev->latent[l], L->latent, latent_width(c) * (size_t)s->len * sizeof(float));
    }
    s->dev_stale = 0;
    m->stats.state_syncs++;
}

int devmem_state_up(Model *m, State *s, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    if (s->dev && s->dev->on != g->dev) { /* made on a device the model no longer uses */
        if (s->dev_newer) return state_to_host(s); /* (fails: its newest copy went with that device) */
        devmem_state_free(s);
    }
    if (!s->dev) {
        DevState *ds = s->dev = df_calloc(1, sizeof *s->dev);
        ds->on = g->dev;
        for (int i = 0; i < 5; i++) *state_arrays(ds, i) = df_calloc((size_t)c->n_layers, sizeof(float *));
        for (int l = 0; !g->host && l < c->n_layers; l++)
            if (c->layer_kind[l] == LAYER_KDA && !(ds->kda[l] = g->ops->alloc(g->dev, kda_floats(c) * sizeof(float))))
                return -1;
        s->dev_stale = 1;
    }
    if (g->host) point_at_arrays(s);
    else if (grow_copy(m, s, T)) return -1;
    else if (s->dev_stale) send_up(m, s);
    DF_INVARIANT(s->dev->cap >= s->len + T && s->cap >= s->len + T && !s->dev_stale,
                 "a State's device copy holds %d positions (the host's %d) for %d + %d", s->dev->cap, s->cap, s->len, T);
    return 0;
}

int devmem_records(Model *m, State *s) {
    const K3Config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == LAYER_KDA && !s->dev->rec[l] &&
            !(s->dev->rec[l] = m->dev->ops->alloc(m->dev->dev, record_floats(c) * sizeof(float))))
            return df_fail("no room on the device for a verify pass's replay records (layer %d)", l), 0;
    return 1;
}

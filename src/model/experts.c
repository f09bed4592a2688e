/* experts.c - a layer's routed experts: acquired from the expert source in its batches, each
 * distinct expert once for all the rows of the pass that chose it, and run by the device. A decode
 * step's experts each write their row's slot of eo; a chunk's rows are gathered by expert, each
 * expert runs as one product of that many rows, and the outputs are gathered back into each row's
 * slot.
 *
 * On an accelerator the hits of its expert cache (model/devcache.h) run from their slots, and the
 * misses are copied into it on the device's copy stream or computed by the CPU threads from host
 * memory meanwhile (HostExperts: as told, or split by the measured seconds per expert of each
 * way). The CPU device has no cache: every expert runs from where the store put it. */
#include <string.h>

#include "model/internal.h"
#include "util/clock.h"
#include "util/err.h"

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

/* One expert on the CPU threads (the helper CPU device: the CPU kernels, not the accelerator's) on
 * `rows` rows of its input on the host (x), its outputs sent to out on the accelerator. */
static void cpu_expert(Model *m, const ExpertMats *w, const float *x, int rows, float *out) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    const Mat *w1 = &w->w1, *w2 = &w->w2, *w3 = &w->w3;
    const int at = 0;
    m->helper->ops->experts_rows(m->helper, &w1, &w2, &w3, NULL, &at, &rows, 1, x, s->ex_h, rows, s->ex_out, c->situ_beta,
                                 c->situ_linear_beta, 1);
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
    if (!g->host) m->stats.experts_cpu += (uint64_t)n_cpu, m->stats.experts_copied += (uint64_t)n_copy;
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

int moe_distinct_experts(const Model *m, int T, int *ids) {
    const K3Config *c = &m->cfg;
    int n = 0;
    for (int i = 0; i < T * c->top_k; i++) {
        int e = m->s.sel[i], at = n;
        while (at > 0 && ids[at - 1] > e) at--;
        if (at > 0 && ids[at - 1] == e) continue;
        memmove(ids + at + 1, ids + at, sizeof *ids * (size_t)(n - at));
        ids[at] = e, n++;
    }
    return n;
}

/* The T rows' experts, acquired from the source in its batches, each distinct expert once: for one
 * row, expert i of the selection writes slot i of eo; for a chunk, the gathered rows (above). */
int routed_experts(Model *m, int layer, int T, int hybrid) {
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
        if (g->host) g->ops->mark(g->dev, DEV_PHASE_IDLE); /* (the CPU waits: it computes nothing meanwhile) */
        if (src->acquire(src, layer, ids + at, count, mats)) return -1;
        if (g->host) g->ops->mark(g->dev, DEV_PHASE_EXPERTS);
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


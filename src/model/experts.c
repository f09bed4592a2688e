/* experts.c - a layer's routed experts: acquired from the expert source in its batches, each
 * distinct expert once for all the rows of the pass that chose it, and run by the device. A decode
 * step's experts each write their row's slot of eo; a pass of several rows runs its experts in calls
 * that each gather their experts' rows (each expert one product of that many rows) and scatter the
 * outputs into the rows' slots, so the device holds one call's rows, not every row's top-k.
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
    int *miss = m->s.routed.miss, n_miss = 0, fills = 0;
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

/* Runs one acquired batch of a layer's experts for a decode step (expert ids[i] writing slot
 * slots[i] of eo): the cache's hits in one launch; the misses to copy, admitted into the cache
 * (their copies run on the copy stream while the compute stream works through what was queued
 * before, the hits' launch included), in a second launch that waits for them; the rest on the CPU
 * threads. */
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

/* Where expert e sits among the pass's distinct experts (ascending). */
static int expert_index(const Routed *r, int e) {
    int lo = 0, hi = r->n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->ids[mid] < e) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Lays the pass's T rows out by expert (each expert's rows in row order): expert j's rows are the
 * gathered rows [at[j], at[j] + rows[j]), gathered row q holding selection sel_of[q] = t * top_k + i
 * of pass row src[q] = t. (On the host only: the experts run in calls that gather their own rows.) */
static void lay_out_rows(Model *m, int T) {
    const K3Config *c = &m->cfg;
    Routed *r = &m->s.routed;
    const int TK = T * c->top_k;
    for (int j = 0; j < r->n; j++) r->rows[j] = 0;
    for (int p = 0; p < TK; p++) r->rows[expert_index(r, m->s.sel[p])]++;
    for (int j = 0, at = 0; j < r->n; at += r->rows[j++]) r->at[j] = r->fill[j] = at;
    for (int p = 0; p < TK; p++) { /* p = t * top_k + i: rows in order */
        int q = r->fill[expert_index(r, m->s.sel[p])]++;
        r->src[q] = p / c->top_k, r->sel_of[q] = p;
    }
}

/* A call of experts on their rows, as they are added (call_add) and run (call_run): the call's rows
 * gathered from z into xi in the order of its experts, the experts on them into xo, their outputs
 * scattered into eo, each to its selection's slot. The layout goes up from the host staging
 * (route_host as ints: z rows, then eo rows). */
typedef struct {
    int k, rows;                 /* experts and rows so far */
    int *in, *out;               /* host staging: [eh_rows] each */
} Call;

static Call call_begin(Model *m) {
    int *idx = (int *)(void *)m->dev->route_host;
    Call call = {0, 0, idx, idx + m->dev->eh_rows};
    return call;
}

/* The gathered rows [a, a + rows) into the call's layout. */
static void call_rows(const Model *m, Call *call, int a, int rows) {
    const Routed *r = &m->s.routed;
    for (int q = a; q < a + rows; q++) call->in[call->rows] = r->src[q], call->out[call->rows++] = r->sel_of[q];
}

/* The call's layout up, its rows gathered into xi: the device holds the staging's indices from here. */
static void call_gather(Model *m, const Call *call) {
    DevModel *g = m->dev;
    g->ops->put(g->dev, g->gather_idx, call->in, sizeof(int) * (size_t)call->rows);
    g->ops->put(g->dev, g->gather_idx + g->eh_rows, call->out, sizeof(int) * (size_t)call->rows);
    g->ops->gather(g->dev, g->xi, g->z, g->gather_idx, call->rows, m->cfg.latent);
}

static void call_run(Model *m, Call *call) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    Routed *r = &m->s.routed;
    if (!call->k) return;
    call_gather(m, call);
    g->ops->experts_rows(g->dev, r->w1, r->w2, r->w3, r->dslot, r->l_at, r->l_rows, call->k, g->xi, g->eh, g->eh_rows, g->xo,
                         c->situ_beta, c->situ_linear_beta, !m->experts->in_place);
    g->ops->scatter(g->dev, g->eo, g->xo, g->gather_idx + g->eh_rows, call->rows, c->latent);
    call->k = call->rows = 0;
}

/* Launches of a batch's `b`-way experts (mats[i] is the batch's expert i, way[i], gathered index
 * index[i]) in order of their row counts, equal counts side by side (a device runs those together),
 * each call holding at most the device's eh rows. */
static void launch_rows(Model *m, const ExpertMats *mats, int n, int b, int T) {
    DevModel *g = m->dev;
    Routed *r = &m->s.routed;
    Call call = call_begin(m);
    for (int rows = 1; rows <= T; rows++)
        for (int i = 0; i < n; i++) {
            if (r->way[i] != b || r->rows[r->index[i]] != rows) continue;
            if (call.rows + rows > g->eh_rows) call_run(m, &call); /* the call is full */
            const int k = call.k++;
            r->w1[k] = &mats[i].w1, r->w2[k] = &mats[i].w2, r->w3[k] = &mats[i].w3, r->dslot[k] = r->where[i];
            r->l_at[k] = call.rows, r->l_rows[k] = rows;
            call_rows(m, &call, r->at[r->index[i]], rows);
        }
    call_run(m, &call);
}

/* Runs one acquired batch of a pass's experts (mats[i] is expert ids[i]) on their rows: as
 * run_batch, the held ones and those to copy each in calls of experts with equal rows side by side,
 * then those for the CPU threads (their rows gathered on the host; each output sent up into xo and
 * scattered from there). */
static int run_batch_rows(Model *m, const ExpertMats *mats, const int *ids, int n, int T, int hybrid) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    Routed *r = &s->routed;
    int n_copy, n_cpu;
    for (int i = 0; i < n; i++) r->index[i] = expert_index(r, ids[i]);
    int fills = expert_ways(m, mats, ids, n, hybrid, r->way, r->where, &n_copy, &n_cpu); /* 0 hit, 1 copied, 2 on the CPU */
    double t0 = df_now();
    for (int b = 0; b < 2; b++) launch_rows(m, mats, n, b, T);
    for (int i = 0; i < n; i++) {
        if (r->way[i] != 2) continue;
        const int a = r->at[r->index[i]], rows = r->rows[r->index[i]];
        Call call = call_begin(m);
        call_rows(m, &call, a, rows);
        for (int q = 0; q < rows; q++)
            memcpy(s->ex_in + (size_t)q * c->latent, s->z + (size_t)call.in[q] * c->latent, sizeof(float) * (size_t)c->latent);
        cpu_expert(m, &mats[i], s->ex_in, rows, g->xo);
        g->ops->put(g->dev, g->gather_idx + g->eh_rows, call.out, sizeof(int) * (size_t)rows);
        g->ops->scatter(g->dev, g->eo, g->xo, g->gather_idx + g->eh_rows, rows, c->latent);
    }
    return ways_done(m, ids, n, t0, n_copy, n_cpu, fills, 0); /* (the seconds per expert are a decode step's) */
}

/* The distinct experts the pass's T rows selected (s->sel), ascending, into r->ids (r->n of them). */
static void distinct_experts(Model *m, int T) {
    const K3Config *c = &m->cfg;
    Routed *r = &m->s.routed;
    for (int i = 0; i < T * c->top_k; i++) r->seen[m->s.sel[i]] = 1;
    r->n = 0;
    for (int e = 0; e < c->n_experts; e++)
        if (r->seen[e]) r->ids[r->n++] = e, r->seen[e] = 0;
}

/* The T rows' experts, acquired from the source in its batches, each distinct expert once: for one
 * row, expert i of the selection writes slot i of eo; for a pass of several rows, the gathered rows
 * (above). */
int routed_experts(Model *m, int layer, int T, int hybrid) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    ExpertSource *src = m->experts;
    Routed *r = &m->s.routed;
    const int K = c->top_k;
    int slot[K3_MAX_TOP_K];
    distinct_experts(m, T);
    const int n = r->n;
    int *ids = r->order; /* acquired ascending, unless the source puts those it has first (ready_first) */
    memcpy(ids, r->ids, sizeof *ids * (size_t)n);
    if (T > 1) lay_out_rows(m, T);
    const int batch = src->max_batch > 0 && src->max_batch < n ? src->max_batch : n;
    int waited = 0;
    if (g->n_slots) devcache_layer(&g->cache, layer);
    for (int at = 0; at < n; at += batch) {
        int count = n - at < batch ? n - at : batch;
        int ready = src->ready_first ? src->ready_first(src, layer, ids + at, n - at) : 1;
        double t0 = df_now();
        if (g->host) g->ops->mark(g->dev, DEV_PHASE_IDLE); /* (the CPU waits: it computes nothing meanwhile) */
        if (src->acquire(src, layer, ids + at, count, r->mats)) return -1;
        if (g->host) g->ops->mark(g->dev, DEV_PHASE_EXPERTS);
        double wait = df_now() - t0;
        m->stats.expert_wait_s += wait;
        if (!ready && !waited) m->stats.first_wait_s += wait, waited = 1;
        if (T == 1)
            for (int i = 0; i < count; i++)
                for (int k = 0; k < K; k++)
                    if (m->s.sel[k] == ids[at + i]) slot[i] = k;
        if (T == 1 ? run_batch(m, r->mats, ids + at, slot, count, hybrid) : run_batch_rows(m, r->mats, ids + at, count, T, hybrid))
            return -1;
    }
    m->stats.expert_bytes += (uint64_t)n * m->cat->expert_bytes;
    return 0;
}

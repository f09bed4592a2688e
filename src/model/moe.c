/* moe.c - the feed-forward half of a layer: the dense SiTU MLP (layer 0, and the fused shared
 * experts) and the latent MoE block (docs/MODEL.md 4.5, 4.6).
 *
 * Routed experts for a chunk are grouped by expert: each selected expert's weights are read once
 * and applied to all the chunk's rows that chose it. Each row then sums its experts' outputs in
 * its own routing order, so a row's result does not depend on which other rows share the chunk. */
#include <math.h>
#include <string.h>

#include "kernels/mat.h"
#include "model/internal.h"
#include "model/ops.h"
#include "util/clock.h"
#include "util/pool.h"

/* SiTU in tasks of SITU_TASK elements on the compute pool: exact SiTU (kernels/exactmath.h) costs
 * about 60 ns an element, 5 M elements a token on K3, most of them in experts of 3,072 (which a
 * decode step runs one at a time: six tasks each). Each element is computed alone, so the bits do
 * not depend on the threads. */
enum { SITU_TASK = 512 };

typedef struct {
    float *a;
    const float *b;
    size_t n;
    float beta, beta_lin;
} SituTask;

static void situ_task(void *ctx, int task) {
    const SituTask *j = ctx;
    const size_t lo = (size_t)task * SITU_TASK, hi = j->n - lo < SITU_TASK ? j->n : lo + SITU_TASK;
    for (size_t i = lo; i < hi; i++) j->a[i] = op_situ(j->a[i], j->b[i], j->beta, j->beta_lin);
}

void model_situ(Model *m, float *a, const float *b, size_t n) {
    SituTask j = {a, b, n, m->cfg.situ_beta, m->cfg.situ_linear_beta};
    const size_t tasks = (n + SITU_TASK - 1) / SITU_TASK;
    if (tasks > 0) pool_run(m->pool, (int)tasks, situ_task, &j);
}

void mlp_forward(Model *m, const MlpWeights *w, int width, const float *u, int T, float *out) {
    Scratch *s = &m->s;
    mat_mul(m->pool, s->h1, &w->gate, u, T);
    mat_mul(m->pool, s->h3, &w->up, u, T);
    model_situ(m, s->h1, s->h3, (size_t)T * width);
    mat_mul(m->pool, out, &w->down, s->h1, T);
}

void moe_route(const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights) {
    /* selection by score + bias, largest first, lowest index on ties; k is small, so insertion */
    float best[K3_MAX_TOP_K];
    int n = 0;
    for (int e = 0; e < n_experts; e++) {
        float choice = op_sigmoid(logits[e]) + bias[e];
        if (n == k && !(choice > best[k - 1])) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && choice > best[at - 1]) {
            best[at] = best[at - 1], ids[at] = ids[at - 1];
            at--;
        }
        best[at] = choice, ids[at] = e;
    }
    double sum = 0;
    for (int i = 0; i < k; i++) sum += (weights[i] = op_sigmoid(logits[ids[i]]));
    float denom = (float)sum + 1e-20f;
    for (int i = 0; i < k; i++) weights[i] /= denom;
}

/* Runs one expert on the rows (t, slot) that selected it, writing eo[t][slot][latent]. */
static void run_expert(Model *m, const ExpertMats *w, int expert, int T) {
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    int rows[MODEL_MAX_CHUNK], slots[MODEL_MAX_CHUNK], n = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < c->top_k; i++)
            if (s->sel[t * c->top_k + i] == expert) rows[n] = t, slots[n++] = i;
    for (int r = 0; r < n; r++) memcpy(s->ex_in + (size_t)r * c->latent, s->z + (size_t)rows[r] * c->latent, sizeof(float) * (size_t)c->latent);
    mat_mul(m->pool, s->ex_h1, &w->w1, s->ex_in, n);
    mat_mul(m->pool, s->ex_h3, &w->w3, s->ex_in, n);
    model_situ(m, s->ex_h1, s->ex_h3, (size_t)n * c->moe_inter);
    mat_mul(m->pool, s->ex_out, &w->w2, s->ex_h1, n);
    for (int r = 0; r < n; r++)
        memcpy(s->eo + ((size_t)rows[r] * c->top_k + slots[r]) * c->latent, s->ex_out + (size_t)r * c->latent,
               sizeof(float) * (size_t)c->latent);
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

static int routed_experts(Model *m, int layer, int T) {
    int ids[MODEL_MAX_ROUTED];
    ExpertMats mats[MODEL_MAX_ROUTED];
    ExpertSource *src = m->experts;
    int n = moe_distinct_experts(m, T, ids);
    int batch = src->max_batch > 0 ? src->max_batch : n, waited = 0;
    for (int at = 0; at < n; at += batch) {
        int count = n - at < batch ? n - at : batch;
        int ready = src->ready_first ? src->ready_first(src, layer, ids + at, n - at) : 1;
        double t0 = df_now();
        if (src->acquire(src, layer, ids + at, count, mats)) return -1;
        double t1 = df_now();
        for (int i = 0; i < count; i++) run_expert(m, &mats[i], ids[at + i], T);
        m->stats.expert_wait_s += t1 - t0;
        if (!ready && !waited) m->stats.first_wait_s += t1 - t0, waited = 1;
        m->stats.experts_s += df_now() - t1;
    }
    m->stats.expert_bytes += (uint64_t)n * m->cat->expert_bytes;
    return 0;
}

int moe_forward(Model *m, const LayerWeights *L, int layer, const float *u, int T, float *out) {
    const K3Config *c = &m->cfg;
    const MoeWeights *w = &L->moe_w;
    Scratch *s = &m->s;
    const int K = c->top_k;
    mat_mul(m->pool, s->router, &w->router, u, T);
    for (int t = 0; t < T; t++)
        moe_route(s->router + (size_t)t * c->n_experts, w->score_bias, c->n_experts, K, s->sel + t * K, s->sel_w + t * K);
    if (m->experts->replace) m->experts->replace(m->experts, layer, m->chunk_pos, s->sel, s->sel_w, T, K);
    /* announce the selections first: a streaming store reads the experts while the latent
     * projection and the shared experts compute */
    if (m->experts->route) {
        double t0 = df_now();
        m->experts->route(m->experts, layer, s->sel, T, K);
        m->stats.route_s += df_now() - t0;
    }
    lookahead(m, layer, u, T);
    mat_mul(m->pool, s->z, &w->latent_down, u, T);
    if (c->n_shared > 0) mlp_forward(m, &w->shared, c->shared_inter, u, T, s->xn); /* xn is free during the FFN */
    if (routed_experts(m, layer, T)) return -1;
    for (int t = 0; t < T; t++) {
        float *y = s->y + (size_t)t * c->latent;
        for (int d = 0; d < c->latent; d++) y[d] = 0;
        for (int i = 0; i < K; i++) {
            const float *eo = s->eo + ((size_t)t * K + i) * c->latent;
            float wt = s->sel_w[t * K + i];
            for (int d = 0; d < c->latent; d++) y[d] += wt * eo[d];
        }
        op_rmsnorm(y, y, w->latent_norm, c->latent, c->rms_eps);
    }
    mat_mul(m->pool, out, &w->latent_up, s->y, T);
    if (c->n_shared > 0)
        for (size_t i = 0; i < (size_t)T * c->hidden; i++) out[i] += s->xn[i];
    return 0;
}

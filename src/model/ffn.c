/* ffn.c - the feed-forward half of a layer (docs/MODEL.md 4.5, 4.6): the dense SiTU MLP (layer 0,
 * and the fused shared experts) and the latent MoE block: routing, the latent projection, the
 * shared experts, the routed experts (experts.c), their weighted combination, its norm and the
 * projection back up.
 *
 * Each row sums its experts' outputs in its own routing order, so a row's result does not depend on
 * which other rows share the pass. The routing comes back to the host: the expert source must see
 * the selections (a streaming store starts reading the experts while the latent projection and the
 * shared experts compute), and may replace them (replayed routing, a benchmark). */
#include <string.h>

#include "model/internal.h"
#include "util/clock.h"

/* A SiTU MLP of T rows ([T][hidden] in u and out), in groups of the device's mlp_rows rows: its
 * hidden activations are the widest of a pass (layer 0's dense MLP), and a group's are all it holds. */
static void mlp(Model *m, const MlpWeights *w, int width, const float *u, int T, float *out) {
    DevModel *g = m->dev;
    const size_t H = (size_t)m->cfg.hidden;
    for (int t0 = 0, n; t0 < T; t0 += n) {
        n = T - t0 < g->mlp_rows ? T - t0 : g->mlp_rows;
        g->ops->mul(g->dev, g->h1, &w->gate, u + (size_t)t0 * H, n);
        g->ops->mul(g->dev, g->h3, &w->up, u + (size_t)t0 * H, n);
        g->ops->situ(g->dev, g->h1, g->h3, (size_t)n * width, m->cfg.situ_beta, m->cfg.situ_linear_beta);
        g->ops->mul(g->dev, out + (size_t)t0 * H, &w->down, g->h1, n);
    }
}

/* The layer's routing of T rows, brought to the host in one copy (the expert source sees it, and
 * may replace it). */
static int route(Model *m, const LayerWeights *L, int layer, int T) {
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
    if (lookahead_wanted(m, T) && g->ops->get(g->dev, s->x, g->x, sizeof(float) * (size_t)c->hidden * T)) return -1;
    lookahead(m, layer, s->x, T);
    return 0;
}

static int moe(Model *m, const LayerWeights *L, int layer, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const MoeWeights *w = &L->moe_w;
    if (route(m, L, layer, T)) return -1;
    g->ops->mul(g->dev, g->z, &w->latent_down, g->x, T);
    /* experts an accelerator may not hold can run on the CPU threads: z comes up before the shared
     * experts are queued, so that the CPU computes while the device does */
    const int hybrid = m->helper && !g->all_kept && g->way != HOST_EXPERTS_COPY;
    if (hybrid && g->ops->get(g->dev, m->s.z, g->z, sizeof(float) * (size_t)T * c->latent)) return -1;
    if (c->n_shared > 0) mlp(m, &w->shared, c->shared_inter, g->x, T, g->xn); /* xn is free during the FFN */
    g->ops->mark(g->dev, DEV_PHASE_EXPERTS);
    if (routed_experts(m, layer, T, hybrid)) return -1;
    record_stretch(m); /* up to the next layer's routing */
    g->ops->mark(g->dev, DEV_PHASE_FFN);
    g->ops->combine(g->dev, g->y, g->eo, g->route_out + (size_t)T * c->top_k, c->top_k, c->latent, T);
    g->ops->rmsnorm(g->dev, g->y, g->y, g->layers[layer].latent_norm, c->latent, T, (size_t)c->latent, c->rms_eps, NULL);
    g->ops->mul(g->dev, g->ffn_out, &w->latent_up, g->y, T);
    if (c->n_shared > 0) g->ops->add(g->dev, g->ffn_out, g->xn, (size_t)T * c->hidden);
    return 0;
}

int ffn_forward(Model *m, int l, int T) {
    const LayerWeights *L = &m->w.layers[l];
    if (L->moe) return moe(m, L, l, T);
    mlp(m, &L->dense, m->cfg.dense_inter, m->dev->x, T, m->dev->ffn_out);
    return 0;
}

/* lookahead.c - router lookahead. Consecutive layers' FFN inputs differ by one residual update,
 * so layer l+1's router applied to layer l's FFN input guesses layer l+1's experts well enough
 * to start reading them while layer l's experts are still being read and computed. The guess
 * only steers reads: layer l+1's own router still decides, so outputs do not change. Only
 * done when the expert source can use a guess (predict) and layer l+1's router is readable now:
 * a streamed spine layer's is not until it is acquired, unless the device holds its copy. Only for
 * decode steps and verify passes: a prefill pass routes to most of a layer's experts, which its
 * store reads once each (a guess would read some of the next layer's before their turn, or twice). */
#include "kernels/mat.h"
#include "kernels/vecops.h"
#include "model/internal.h"

/* How many of the layer's selections (distinct experts) the guess held. */
static void score(Model *m, int T) {
    const int n = T * m->cfg.top_k;
    for (int i = 0; i < n; i++) {
        int e = m->s.sel[i], first = 1, guessed = 0;
        for (int j = 0; j < i && first; j++) first = m->s.sel[j] != e;
        if (!first) continue;
        for (int j = 0; j < n && !guessed; j++) guessed = m->s.look_sel[j] == e;
        m->stats.look_routed++;
        m->stats.look_hits += (uint64_t)guessed;
    }
}

int lookahead_wanted(const Model *m, int T) { return m->experts->predict && T <= MODEL_MAX_VERIFY; }

void lookahead(Model *m, int layer, const float *u, int T) {
    const K3Config *c = &m->cfg;
    Scratch *s = &m->s;
    if (m->look_layer == layer) score(m, T);
    m->look_layer = -1;
    int next = layer + 1;
    if (!lookahead_wanted(m, T) || next >= c->n_layers || !m->w.layers[next].moe) return;
    const MoeWeights *w = &m->w.layers[next].moe_w;
    if (next >= m->spine->resident_layers && !devmem_holds(m, &w->router)) return;
    mat_mul(m->pool, s->router, &w->router, u, T); /* the router scratch is free once sel is known */
    for (int t = 0; t < T; t++)
        op_route(s->router + (size_t)t * c->n_experts, w->score_bias, c->n_experts, c->top_k, s->look_sel + t * c->top_k,
                  s->look_w + t * c->top_k);
    m->experts->predict(m->experts, next, s->look_sel, T, c->top_k);
    m->look_layer = next;
}

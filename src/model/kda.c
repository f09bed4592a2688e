/* kda.c - Kimi Delta Attention of a pass's rows (docs/MODEL.md 4.3 and 4.8): the projections of
 * every row at once, then each sequence's convolution and delta-rule recurrence on its own rows and
 * State (the device's kda operation), then the gated output norm and the output projection.
 *
 * Verification (model_forward_verify) rolls back by replay rather than by a copy of the state after
 * every row: the pass keeps the windows and matrices it starts from and each row's raw inputs to the
 * recurrence (the q, k, v projections, the decay-gate and beta pre-activations) in the State's
 * records, and kda_commit re-runs the kda operation over the kept rows. The same operation on the
 * same inputs gives the same bits, and the records are a fraction of per-row state copies. */
#include "model/internal.h"

/* The KDA operation of layer l over `rows` rows of the recurrence's inputs (raw projections, decay
 * gate and beta pre-activations), advancing the windows and matrices at kda (conv, then S); its
 * outputs in the device's scratch from row row0 on. */
static DevKda kda_args(const Model *m, int l, float *kda, float *const *raw, const float *f, const float *beta_raw, int row0,
                       int rows) {
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const DevLayer *D = &g->layers[l];
    const size_t at = (size_t)row0 * (size_t)config_kda_width(c), at_h = (size_t)row0 * (size_t)c->kda_heads;
    DevKda a = {c->kda_heads, c->kda_head_dim, c->conv_kernel, rows, {raw[0], raw[1], raw[2]}, kda,
                {D->conv[0], D->conv[1], D->conv[2]}, {g->qkv[0] + at, g->qkv[1] + at, g->qkv[2] + at}, g->decay + at,
                g->beta + at_h, f, beta_raw, D->decay_rate, m->w.a_log_mode != ALOG_PER_HEAD, D->dt_bias,
                c->gate_lower_bound, kda + conv_floats(c), g->o + at};
    return a;
}

void kda_attention(Model *m, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const KdaWeights *w = &m->w.layers[l].kda;
    const Mat *proj[3] = {&w->q, &w->k, &w->v};
    float *raw[3] = {g->raw[0], g->raw[1], g->raw[2]}, *f = g->f, *beta_raw = g->beta_raw;
    if (m->verifying) { /* (a verify pass is one sequence) the projections go straight to its records */
        const State *st = seqs[0].st;
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
    const size_t W = (size_t)config_kda_width(c), NH = (size_t)c->kda_heads;
    for (int q = 0; q < n_seqs; q++) {
        const size_t r0 = (size_t)seqs[q].row0;
        float *const at[3] = {raw[0] + r0 * W, raw[1] + r0 * W, raw[2] + r0 * W};
        DevKda a = kda_args(m, l, seqs[q].st->dev->kda[l], at, f + r0 * W, beta_raw + r0 * NH, seqs[q].row0, seqs[q].rows);
        o->kda(d, &a);
    }
    const int D = c->kda_head_dim;
    o->rmsnorm(d, g->o, g->o, g->layers[l].o_norm, D, c->kda_heads * T, (size_t)D, c->rms_eps, g->g);
    o->mul(d, g->attn_out, &w->o, g->o, T);
}

void kda_commit(State *s, int n) {
    const Model *m = s->model;
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    if (!s->dev) return; /* (no pass ran) */
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_KDA) continue;
        Record r = record_at(c, s->dev->rec[l]);
        g->ops->copy(g->dev, s->dev->kda[l], r.conv, kda_floats(c) * sizeof(float));
        DevKda a = kda_args(m, l, s->dev->kda[l], r.raw, r.f, r.beta_raw, 0, n);
        g->ops->kda(g->dev, &a);
    }
    s->dev_newer = !g->host;
}

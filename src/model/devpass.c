/* devpass.c - a forward (a decode step, a prefill chunk of up to MODEL_MAX_CHUNK positions, a verify
 * pass, or a batch of several sequences' rows) with every layer on the device (kernels/devops.h):
 * the same schedule as k3.c, kda.c, mla.c and moe.c, step for step, on device memory. As on the
 * host, everything but the attention's state runs on all the pass's rows at once; the KDA
 * recurrence and the MLA cache and attention run sequence by sequence on their own rows.
 *
 * What goes up per pass: the tokens' embedding rows (and, per MoE layer of a chunk, where each
 * row's inputs go among its experts'). What comes back: each MoE layer's routing (the expert source
 * must see the selections, and acquire the experts), and the logits. A spine layer the device holds
 * is not acquired (a streamed one is not read again).
 *
 * Speculation. A verify pass on the device keeps its replay records there too (per KDA layer: the
 * matrices and conv windows before the pass and each row's conv inputs, decay-gate and beta
 * pre-activations), and state_commit of n rows replays the first n rows there with the same
 * kernel (devpass_commit): a verify pass moves no state across PCIe. The MLA rows past the kept
 * ones are dropped by the State's length, as on the host.
 *
 * The device memory this reads and writes (the Model's scratch, its vectors, the States' copies) is
 * model/devmodel.c's; the routed experts are model/devexperts.c's. */
#include <stdlib.h>
#include <string.h>

#include "model/devpass_int.h"
#include "util/clock.h"
#include "util/err.h"

/* The KDA operation of layer l over `rows` rows of the recurrence's inputs (raw projections, decay
 * gate and beta pre-activations), advancing the windows and matrices at kda (conv, then S); its
 * outputs in the model's scratch from row row0 on. */
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

/* KDA of the pass's T rows: the projections of all of them, then each sequence's recurrence on its
 * own rows and State. A verify pass (one sequence) writes the projections the recurrence reads
 * straight into the State's records, after keeping there the windows and matrices it starts from. */
static void dev_kda(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const KdaWeights *w = &L->kda;
    const Mat *proj[3] = {&w->q, &w->k, &w->v};
    float *raw[3] = {g->raw[0], g->raw[1], g->raw[2]}, *f = g->f, *beta_raw = g->beta_raw;
    if (m->verifying) {
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

void devpass_commit(State *s, int n) {
    const Model *m = s->model;
    const DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    if (!g || !s->dev || s->dev_stale) return; /* (the device is closed: the State went with it) */
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_KDA) continue;
        Record r = record_at(c, s->dev->rec[l]);
        g->ops->copy(g->dev, s->dev->kda[l], r.conv, kda_floats(c) * sizeof(float));
        DevKda a = kda_args(m, l, s->dev->kda[l], r.raw, r.f, r.beta_raw, 0, n);
        g->ops->kda(g->dev, &a);
    }
    s->dev_newer = 1;
}

/* Latent attention of the pass's rows [row0, row0 + T), one sequence's, after its n cached
 * positions, in launches of as many rows as the scores scratch holds (row r sees n + r + 1). */
static void dev_mla_attend(Model *m, State *st, int l, int n, int row0, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t NH = (size_t)c->mla_heads, R = (size_t)c->kv_lora, QK = (size_t)config_mla_qk_dim(c);
    for (int t0 = row0, end = row0 + T, rows; t0 < end; t0 += rows) {
        rows = end - t0;
        const int before = n + t0 - row0; /* the sequence's positions before row t0 */
        while (rows > 1 && (size_t)rows * (size_t)(before + rows) > (size_t)m->max_context) rows--;
        DevMla a = {c->mla_heads, c->kv_lora, c->qk_nope, c->qk_rope, before + 1, rows, g->qf + (size_t)t0 * NH * QK,
                    g->qlat + (size_t)t0 * NH * R, st->dev->latent[l], g->scores, g->lctx + (size_t)t0 * NH * R};
        g->ops->mla(g->dev, &a);
    }
}

/* MLA of the pass's T rows: each sequence's latent rows appended to its cache, then causal
 * attention of each sequence's rows over its own cache. */
static void dev_mla(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const MlaWeights *w = &L->mla;
    const DevLayer *D = &g->layers[l];
    const int NH = c->mla_heads, V = c->v_head, R = c->kv_lora;
    const size_t KVW = latent_width(c);
    o->mul(d, g->cq, &w->q_a, g->xn, T);
    o->rmsnorm(d, g->cq, g->cq, D->q_a_norm, c->q_lora, T, (size_t)c->q_lora, c->rms_eps, NULL);
    o->mul(d, g->qf, &w->q_b, g->cq, T);
    o->mul(d, g->ckv, &w->kv_a, g->xn, T);
    for (int q = 0; q < n_seqs; q++) { /* the new cache rows: c normalised in place, k_pe raw */
        float *rows = seqs[q].st->dev->latent[l] + KVW * (size_t)seqs[q].st->len;
        o->copy(d, rows, g->ckv + KVW * (size_t)seqs[q].row0, sizeof(float) * KVW * (size_t)seqs[q].rows);
        o->rmsnorm(d, rows, rows, D->kv_a_norm, R, seqs[q].rows, KVW, c->rms_eps, NULL);
    }
    o->mul(d, g->g, &w->g, g->xn, T);
    const MatHeads keys = {NH, 0, c->qk_nope + V, c->qk_nope, config_mla_qk_dim(c)};
    const MatHeads values = {NH, c->qk_nope, c->qk_nope + V, V, R};
    o->tmul_heads(d, g->qlat, &w->kv_b, &keys, g->qf, T);
    for (int q = 0; q < n_seqs; q++) dev_mla_attend(m, seqs[q].st, l, seqs[q].st->len, seqs[q].row0, seqs[q].rows);
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

static int dev_attention(Model *m, const Seq *seqs, int n_seqs, int l, int n_anchors, int T) {
    DevModel *g = m->dev;
    const DevLayer *D = &g->layers[l];
    const size_t H = (size_t)m->cfg.hidden, HT = H * (size_t)T;
    g->ops->mark(g->dev, DEV_PHASE_ATTENTION);
    dev_attnres(m, n_anchors, D->attn_res_q, 0, T, g->xn);
    int boundary = l % m->cfg.attn_res_block == 0;
    if (boundary) g->ops->copy(g->dev, g->anchors + (size_t)n_anchors++ * MODEL_MAX_CHUNK * H, g->P, HT * sizeof(float));
    g->ops->rmsnorm(g->dev, g->xn, g->xn, D->attn_norm, (int)H, T, H, m->cfg.rms_eps, NULL);
    if (m->w.layers[l].kind == LAYER_MLA) dev_mla(m, &m->w.layers[l], l, seqs, n_seqs, T);
    else dev_kda(m, &m->w.layers[l], l, seqs, n_seqs, T);
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

/* Records what is queued from here to the next wait, when the pass may be recorded: a decode step
 * of one sequence, every weight on the device. Such steps repeat the same launches token after token
 * (positions and States change only their arguments), so the device replays each stretch as one
 * graph instead of launching its kernels one by one. A stretch starts once the host has recorded
 * it: the device's wait for that is marked idle, no phase's. */
static void record(Model *m) {
    DevModel *g = m->dev;
    if (!g->recordable) return;
    if (g->dev->graphs) g->ops->mark(g->dev, DEV_PHASE_IDLE);
    m->stats.dev_graphs += (uint64_t)g->ops->record(g->dev, g->n_recorded++);
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
    if (devpass_routed(m, layer, T, hybrid)) return -1;
    record(m); /* up to the next layer's routing */
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

/* The head for rows out_rows[0..n_out) of the pass: final AttnRes, norm and lm_head, into the
 * scratch's logits. Consecutive rows run on their own; others (the last row of each of several
 * sequences) take the tail of every row, then the asked-for rows gathered. */
static void dev_head(Model *m, int n_anchors, int T, const int *out_rows, int n_out) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    int consecutive = 1;
    for (int i = 1; i < n_out; i++) consecutive &= out_rows[i] == out_rows[0] + i;
    g->ops->mark(g->dev, DEV_PHASE_HEAD);
    if (consecutive) { /* each row's tail is its own */
        dev_attnres(m, n_anchors, g->out_res_q, out_rows[0], n_out, g->x);
        g->ops->rmsnorm(g->dev, g->x, g->x, g->final_norm, c->hidden, n_out, H, c->rms_eps, NULL);
        g->ops->mul(g->dev, g->logits, &m->w.lm_head, g->x, n_out);
        return;
    }
    dev_attnres(m, n_anchors, g->out_res_q, 0, T, g->x);
    g->ops->rmsnorm(g->dev, g->x, g->x, g->final_norm, c->hidden, T, H, c->rms_eps, NULL);
    g->ops->put(g->dev, g->gather_idx, out_rows, sizeof(int) * (size_t)n_out);
    g->ops->gather(g->dev, g->xn, g->x, g->gather_idx, n_out, c->hidden);
    g->ops->mul(g->dev, g->logits, &m->w.lm_head, g->xn, n_out);
}

int devpass_forward(Model *m, const Seq *seqs, int n_seqs, const int *tokens, int T, const int *out_rows, int n_out,
                    float *logits) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    for (int q = 0; q < n_seqs; q++) {
        State *st = seqs[q].st;
        if (devpass_state_up(m, st, seqs[q].rows)) return -1;
        st->dev_newer = 1; /* from here on the device's copy is the State */
        st->dev_verify = m->verifying;
    }
    mat_gather_rows(&m->w.embed, tokens, T, m->s.P);
    g->ops->put(g->dev, g->P, m->s.P, sizeof(float) * H * (size_t)T);
    g->recordable = g->whole_spine && T == 1 && n_seqs == 1 && !m->verifying;
    g->n_recorded = 0;
    record(m); /* up to the first MoE layer's routing */
    m->look_layer = -1;
    m->chunk_pos = seqs[0].st->len; /* trace replay (benchmark only) follows the first sequence */
    int n_anchors = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const int entered = model_enter_layer(m, l);
        if (entered < 0) return g->ops->get(g->dev, NULL, NULL, 0), -1; /* (ends a recording) */
        n_anchors = dev_attention(m, seqs, n_seqs, l, n_anchors, T);
        int rc = dev_ffn(m, l, n_anchors, T);
        model_leave_layer(m, l, entered);
        if (rc) return -1;
    }
    for (int q = 0; q < n_seqs; q++) seqs[q].st->len += seqs[q].rows;
    m->stats.positions += (uint64_t)T;
    m->stats.forwards++;
    m->stats.dev_forwards++;
    if (logits) dev_head(m, n_anchors, T, out_rows, n_out);
    g->ops->mark(g->dev, DEV_PHASE_IDLE);
    int rc = g->ops->get(g->dev, logits, g->logits, logits ? sizeof(float) * (size_t)n_out * c->vocab : 0);
    add_phase_times(m);
    if (rc || !logits) return rc ? -1 : 0;
    return model_check_logits(m, logits, out_rows, n_out);
}

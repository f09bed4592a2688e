/* mla.c - gated multi-head latent attention without positional encoding (docs/MODEL.md 4.4) for a
 * pass's rows, each sequence's appended after its cached positions.
 *
 * Two cache layouts (model.h, MlaCacheMode). Latent (the default): the cache holds c (normalised
 * latent) and k_pe per position, and each head works in latent space: its query is absorbed into
 * kv_b's key rows, q_lat = W_uk[h]^T q_nope, so score_u = q_lat . c_u + q_pe . kpe_u, and its output
 * is W_uv[h] (sum_u p_u c_u). Expanded (the reference layout, the CPU device's only): the cache holds
 * every head's key and value, exactly what the reference attention reads. Same weights, 53x less
 * cache to hold and read per position on K3 with the latent one, and no kv_b product for the new
 * positions.
 *
 * The projections run once over all the pass's rows; each sequence appends its rows to its own
 * cache and attends over it, so a row's result is the one its sequence alone would get. */
#include "model/internal.h"

/* Latent attention of the pass's rows [row0, row0 + T), one sequence's, after its n cached
 * positions, in launches of as many rows as the scores scratch holds (row r sees n + r + 1). */
static void attend_latent(Model *m, State *st, int l, int n, int row0, int T) {
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

/* The latent layout: each sequence's latent rows appended to its cache (c normalised in place, k_pe
 * raw), each head's query absorbed into kv_b's key rows (one product over every row and head), each
 * sequence's rows attending over its own cache, and each head's attended latent expanded through
 * kv_b's value rows (one product again). kv_b's rows are head-major: a head's qk_nope key rows, then
 * its v_head value rows. */
static void latent_attention(Model *m, const MlaWeights *w, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const int NH = c->mla_heads, V = c->v_head, R = c->kv_lora;
    const size_t KVW = latent_width(c);
    for (int q = 0; q < n_seqs; q++) {
        float *rows = seqs[q].st->dev->latent[l] + KVW * (size_t)seqs[q].pos;
        o->copy(d, rows, g->ckv + KVW * (size_t)seqs[q].row0, sizeof(float) * KVW * (size_t)seqs[q].rows);
        o->rmsnorm(d, rows, rows, g->layers[l].kv_a_norm, R, seqs[q].rows, KVW, c->rms_eps, NULL);
    }
    o->mul(d, g->g, &w->g, g->xn, T);
    const MatHeads keys = {NH, 0, c->qk_nope + V, c->qk_nope, config_mla_qk_dim(c)};
    const MatHeads values = {NH, c->qk_nope, c->qk_nope + V, V, R};
    o->tmul_heads(d, g->qlat, &w->kv_b, &keys, g->qf, T);
    for (int q = 0; q < n_seqs; q++) attend_latent(m, seqs[q].st, l, seqs[q].pos, seqs[q].row0, seqs[q].rows);
    o->mul_heads(d, g->att, &w->kv_b, &values, g->lctx, T);
}

/* The expanded layout: each sequence's rows normalised, expanded through kv_b, appended to its key
 * and value caches and attending over them (the device's mla_expanded operation). */
static void expanded_attention(Model *m, const MlaWeights *w, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t NH = (size_t)c->mla_heads, QK = (size_t)config_mla_qk_dim(c);
    for (int q = 0; q < n_seqs; q++) {
        const size_t r0 = (size_t)seqs[q].row0;
        DevMlaExpanded a = {c->mla_heads, c->kv_lora, c->qk_nope, c->qk_rope, c->v_head, seqs[q].pos, seqs[q].rows,
                            c->rms_eps, &w->kv_b, g->layers[l].kv_a_norm, g->ckv + r0 * latent_width(c),
                            g->qf + r0 * NH * QK, g->cq, g->kvf, seqs[q].st->dev->keys[l], seqs[q].st->dev->values[l],
                            g->scores, g->att + r0 * NH * (size_t)c->v_head};
        g->ops->mla_expanded(g->dev, &a);
    }
    g->ops->mul(g->dev, g->g, &w->g, g->xn, T);
}

void mla_attention(Model *m, int l, const Seq *seqs, int n_seqs, int T) {
    DevModel *g = m->dev;
    const DevOps *o = g->ops;
    MatDevice *d = g->dev;
    const K3Config *c = &m->cfg;
    const MlaWeights *w = &m->w.layers[l].mla;
    o->mul(d, g->cq, &w->q_a, g->xn, T);
    o->rmsnorm(d, g->cq, g->cq, g->layers[l].q_a_norm, c->q_lora, T, (size_t)c->q_lora, c->rms_eps, NULL);
    o->mul(d, g->qf, &w->q_b, g->cq, T);
    o->mul(d, g->ckv, &w->kv_a, g->xn, T);
    if (m->mla_cache == MLA_CACHE_LATENT) latent_attention(m, w, l, seqs, n_seqs, T);
    else expanded_attention(m, w, l, seqs, n_seqs, T);
    o->gate(d, g->att, g->g, (size_t)T * c->mla_heads * c->v_head);
    o->mul(d, g->attn_out, &w->o, g->att, T);
}

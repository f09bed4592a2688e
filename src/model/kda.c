/* kda.c - Kimi Delta Attention for T positions (docs/MODEL.md 4.3 and 4.8). Projections run
 * batched over the chunk; the short convolution and the delta-rule recurrence run position by
 * position, one head per pool task (heads are independent, so the result is thread-count free).
 *
 * Verification (model_forward_verify) rolls back by replay rather than by a copy of the state
 * after every row: the pass records the state before it and each row's recurrence inputs (raw
 * conv inputs; normalised k, v, decay, beta), and kda_commit re-runs only the cheap sequential
 * part over the kept rows. The same delta_step on the same inputs gives the same bits, and the
 * record is a fraction of per-row state copies (one S per layer instead of one per row). */
#include <math.h>
#include <string.h>

#include "kernels/mat.h"
#include "model/internal.h"
#include "model/ops.h"

/* Causal depthwise conv + SiLU over T positions for one stream, updating its window state.
 * hist: [width][K-1] previous raw inputs (oldest first); x: [T][width] raw; y: [T][width]. */
static void short_conv(const float *w, float *hist, const float *x, float *y, int T, int width, int K) {
    for (int c = 0; c < width; c++) {
        float *h = hist + (size_t)c * (K - 1);
        const float *wc = w + (size_t)c * K;
        for (int t = 0; t < T; t++) {
            float cur = x[(size_t)t * width + c], acc = 0;
            for (int j = 0; j < K - 1; j++) acc += wc[j] * h[j];
            acc += wc[K - 1] * cur;
            y[(size_t)t * width + c] = op_silu(acc);
            if (K > 1) {
                memmove(h, h + 1, sizeof *h * (size_t)(K - 2));
                h[K - 2] = cur;
            }
        }
    }
}

typedef struct {
    Model *m;
    const KdaWeights *w;
    int l;
    const Seq *seqs;
} KdaTask;

/* One delta-rule step for one head: decay S along the key axis, correct it toward v, read with q. */
static void delta_step(float *S, const float *q, const float *k, const float *v, const float *decay, float beta,
                       float *o, int D) {
    float pred[K3_MAX_KDA_HEAD_DIM];
    for (int j = 0; j < D; j++) pred[j] = 0;
    for (int i = 0; i < D; i++) {
        float *row = S + (size_t)i * D;
        for (int j = 0; j < D; j++) row[j] *= decay[i];
        for (int j = 0; j < D; j++) pred[j] += k[i] * row[j];
    }
    for (int j = 0; j < D; j++) pred[j] = beta * (v[j] - pred[j]);
    for (int j = 0; j < D; j++) o[j] = 0;
    for (int i = 0; i < D; i++) {
        float *row = S + (size_t)i * D;
        for (int j = 0; j < D; j++) row[j] += k[i] * pred[j];
        for (int j = 0; j < D; j++) o[j] += q[i] * row[j];
    }
}

/* One row's recurrence inputs for head h, in the layout of LayerState.v_step. */
static void record_step(float *rec, int W, int h, int D, const float *k, const float *v, const float *decay, float beta) {
    memcpy(rec + (size_t)h * D, k, sizeof *k * (size_t)D);
    memcpy(rec + W + (size_t)h * D, v, sizeof *v * (size_t)D);
    memcpy(rec + 2 * (size_t)W + (size_t)h * D, decay, sizeof *decay * (size_t)D);
    rec[3 * (size_t)W + h] = beta;
}

/* Task i: head i % heads of sequence i / heads, over that sequence's rows in order. */
static void kda_head(void *ctx, int i) {
    KdaTask *a = ctx;
    const K3Config *c = &a->m->cfg;
    Scratch *s = &a->m->s;
    const int D = c->kda_head_dim, W = config_kda_width(c), h = i % c->kda_heads;
    const Seq *q_seq = &a->seqs[i / c->kda_heads];
    LayerState *st = &q_seq->st->layers[a->l];
    float *S = st->S + (size_t)h * D * D, decay[K3_MAX_KDA_HEAD_DIM];
    if (a->m->verifying) memcpy(st->v_S + (size_t)h * D * D, S, sizeof *S * (size_t)D * D);
    for (int r = 0; r < q_seq->rows; r++) {
        int t = q_seq->row0 + r;
        size_t row = (size_t)t * W + (size_t)h * D;
        float *q = s->q + row, *k = s->k + row, *v = s->v + row, *f = s->f + row, *o = s->o + row;
        op_l2norm_scaled(q, D, 1.0f / sqrtf((float)D));
        op_l2norm_scaled(k, D, 1.0f);
        for (int d = 0; d < D; d++) {
            float rate = a->m->w.a_log_mode == ALOG_PER_HEAD ? a->w->decay_rate[h] : a->w->decay_rate[d];
            float g = c->gate_lower_bound * op_sigmoid(rate * (f[d] + a->w->dt_bias[h * D + d]));
            decay[d] = expf(g);
        }
        float beta = op_sigmoid(s->beta_raw[(size_t)t * c->kda_heads + h]);
        if (a->m->verifying) record_step(st->v_step + (size_t)r * (3 * W + c->kda_heads), W, h, D, k, v, decay, beta);
        delta_step(S, q, k, v, decay, beta, o, D);
        op_rmsnorm(o, o, a->w->o_norm, D, c->rms_eps);
        for (int j = 0; j < D; j++) o[j] *= op_sigmoid(s->g[row + j]);
    }
}

void kda_forward(Model *m, const LayerWeights *L, int l, const Seq *seqs, int n, const float *xn, int T, float *out) {
    const K3Config *c = &m->cfg;
    const KdaWeights *w = &L->kda;
    Scratch *s = &m->s;
    const int W = config_kda_width(c), K = c->conv_kernel;
    const Mat *proj[3] = {&w->q, &w->k, &w->v};
    const float *conv_w[3] = {w->conv_q, w->conv_k, w->conv_v};
    float *conv_out[3] = {s->q, s->k, s->v};
    if (m->verifying) { /* (a verify pass is one sequence) */
        LayerState *st = &seqs[0].st->layers[l];
        memcpy(st->v_conv, st->conv, sizeof(float) * 3 * (size_t)W * (K - 1));
    }
    for (int i = 0; i < 3; i++) { /* raw projections land in o scratch, the conv writes q/k/v */
        mat_mul(m->pool, s->o, proj[i], xn, T);
        for (int q = 0; q < n; q++) {
            LayerState *st = &seqs[q].st->layers[l];
            const size_t at = (size_t)seqs[q].row0 * W;
            if (m->verifying) memcpy(st->v_raw + (size_t)i * MODEL_MAX_VERIFY * W, s->o + at, sizeof(float) * (size_t)seqs[q].rows * W);
            short_conv(conv_w[i], st->conv + (size_t)i * W * (K - 1), s->o + at, conv_out[i] + at, seqs[q].rows, W, K);
        }
    }
    mat_mul(m->pool, s->g, &w->g, xn, T);
    mat_mul(m->pool, s->fa, &w->f_a, xn, T);
    mat_mul(m->pool, s->f, &w->f_b, s->fa, T);
    mat_mul(m->pool, s->beta_raw, &w->b, xn, T);
    KdaTask task = {m, w, l, seqs};
    pool_run(m->pool, n * c->kda_heads, kda_head, &task);
    mat_mul(m->pool, out, &w->o, s->o, T);
}

typedef struct {
    const Model *m;
    LayerState *st;
    int n;
} CommitTask;

/* Head h's recurrent matrix: the one before the verify pass, stepped through rows 0..n-1. */
static void commit_head(void *ctx, int h) {
    CommitTask *a = ctx;
    const K3Config *c = &a->m->cfg;
    const int D = c->kda_head_dim, W = config_kda_width(c);
    float *S = a->st->S + (size_t)h * D * D, o[K3_MAX_KDA_HEAD_DIM];
    memcpy(S, a->st->v_S + (size_t)h * D * D, sizeof *S * (size_t)D * D);
    for (int t = 0; t < a->n; t++) {
        const float *rec = a->st->v_step + (size_t)t * (3 * W + c->kda_heads);
        const float *k = rec + (size_t)h * D; /* q only shapes the output, which is discarded */
        delta_step(S, k, k, rec + W + (size_t)h * D, rec + 2 * (size_t)W + (size_t)h * D, rec[3 * (size_t)W + h], o, D);
    }
}

void kda_commit(const Model *m, LayerState *st, int n) {
    const K3Config *c = &m->cfg;
    const int W = config_kda_width(c), K = c->conv_kernel;
    /* the window after row n-1 is the last K-1 entries of [old window, raw rows 0..n-1] */
    for (int i = 0; i < 3; i++)
        for (int ch = 0; ch < W; ch++) {
            const float *old = st->v_conv + ((size_t)i * W + ch) * (K - 1);
            float *win = st->conv + ((size_t)i * W + ch) * (K - 1);
            for (int j = 0; j < K - 1; j++)
                win[j] = n + j < K - 1 ? old[n + j] : st->v_raw[((size_t)i * MODEL_MAX_VERIFY + (n + j - (K - 1))) * W + ch];
        }
    CommitTask task = {m, st, n};
    pool_run(m->pool, c->kda_heads, commit_head, &task);
}

/* kda.c - Kimi Delta Attention for T positions (k3-model.md 3.3 and 3.8). Projections run
 * batched over the chunk; the short convolution and the delta-rule recurrence run position by
 * position, one head per pool task (heads are independent, so the result is thread-count free). */
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
    LayerState *st;
    int T;
} KdaTask;

/* One delta-rule step for one head: decay S along the key axis, correct it toward v, read with q. */
static void delta_step(float *S, const float *q, const float *k, const float *v, const float *decay, float beta,
                       float *o, int D) {
    float pred[1024];
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

static void kda_head(void *ctx, int h) {
    KdaTask *a = ctx;
    const K3Config *c = &a->m->cfg;
    Scratch *s = &a->m->s;
    const int D = c->kda_head_dim, W = config_kda_width(c);
    float *S = a->st->S + (size_t)h * D * D, decay[1024];
    for (int t = 0; t < a->T; t++) {
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
        delta_step(S, q, k, v, decay, beta, o, D);
        op_rmsnorm(o, o, a->w->o_norm, D, c->rms_eps);
        for (int j = 0; j < D; j++) o[j] *= op_sigmoid(s->g[row + j]);
    }
}

void kda_forward(Model *m, const LayerWeights *L, LayerState *st, const float *xn, int T, float *out) {
    const K3Config *c = &m->cfg;
    const KdaWeights *w = &L->kda;
    Scratch *s = &m->s;
    const int W = config_kda_width(c), K = c->conv_kernel;
    mat_mul(m->pool, s->o, &w->q, xn, T); /* raw projections land in o/h1/h3 scratch, conv writes q/k/v */
    short_conv(w->conv_q, st->conv, s->o, s->q, T, W, K);
    mat_mul(m->pool, s->o, &w->k, xn, T);
    short_conv(w->conv_k, st->conv + (size_t)W * (K - 1), s->o, s->k, T, W, K);
    mat_mul(m->pool, s->o, &w->v, xn, T);
    short_conv(w->conv_v, st->conv + 2 * (size_t)W * (K - 1), s->o, s->v, T, W, K);
    mat_mul(m->pool, s->g, &w->g, xn, T);
    mat_mul(m->pool, s->fa, &w->f_a, xn, T);
    mat_mul(m->pool, s->f, &w->f_b, s->fa, T);
    mat_mul(m->pool, s->beta_raw, &w->b, xn, T);
    KdaTask task = {m, w, st, T};
    pool_run(m->pool, c->kda_heads, kda_head, &task);
    mat_mul(m->pool, out, &w->o, s->o, T);
}

#include "kernels/vecops.h"

#include <math.h>

#include "format/config.h"
#include "kernels/exactmath.h"

/* Sum of squares in double: one fixed order, and no precision lost on long rows. */
static double sumsq(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float inv = (float)(1.0 / sqrt(sumsq(x, n) / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

void op_l2norm_scaled(float *x, int n, float scale) {
    double norm = sqrt(sumsq(x, n));
    float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
    for (int i = 0; i < n; i++) x[i] = x[i] * inv * scale;
}

float op_silu(float x) { return x * op_sigmoid(x); }

/* The same bits on the GPU (kernels/exactmath.h says why). */
float op_situ(float a, float b, float beta, float beta_lin) { return exact_situ(a, b, beta, beta_lin); }

void op_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (x[i] = expf(x[i] - mx));
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

int op_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#define ATTNRES_MAX_VALUES (K3_MAX_LAYERS + 2) /* every layer a block boundary, plus P */

void op_attnres(float *out, const float *const *values, int n, const float *w, int dim, float eps) {
    float score[ATTNRES_MAX_VALUES];
    for (int i = 0; i < n; i++) {
        float inv = (float)(1.0 / sqrt(sumsq(values[i], dim) / dim + (double)eps));
        double s = 0;
        for (int d = 0; d < dim; d++) s += (double)w[d] * (double)(values[i][d] * inv);
        score[i] = (float)s;
    }
    op_softmax(score, n);
    for (int d = 0; d < dim; d++) {
        float acc = 0;
        for (int i = 0; i < n; i++) acc += score[i] * values[i][d];
        out[d] = acc;
    }
}

void op_route(const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights) {
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

/* vecops.h - the model's small vector operations (docs/MODEL.md 4.0), in fp32 with a fixed
 * evaluation order: what the CPU device (kernels/cpu/) computes besides the matrix products. They act
 * on one row (one position) at a time. */
#ifndef DF_VECOPS_H
#define DF_VECOPS_H

/* out = w * (x / sqrt(mean(x^2) + eps)); w may be NULL (weightless). out may alias x. */
void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* x /= max(||x||_2, 1e-12), then *= scale */
void op_l2norm_scaled(float *x, int n, float scale);
static inline float op_sigmoid(float x);
float op_silu(float x);
/* SiTU(a, b) = [beta * tanh(a/beta) * sigmoid(a)] * [beta_lin * tanh(b/beta_lin)] */
float op_situ(float a, float b, float beta, float beta_lin);
/* Block Attention Residuals: out = sum_i softmax_i(w . rmsnorm(v_i)) v_i over n values. */
void op_attnres(float *out, const float *const *values, int n, const float *w, int dim, float eps);
/* a . b in the matrix kernels' reduction order (kernels.h), for attention over cached rows. */
static inline float op_dot(const float *a, const float *b, int n);
/* y[i] += a * x[i] (one product, then one sum, per element). */
static inline void op_axpy(float *y, float a, const float *x, int n);
/* In-place softmax over n entries. */
void op_softmax(float *x, int n);
/* Index of the largest value; the lowest index wins ties. */
int op_argmax(const float *x, int n);
/* MoE routing of one row (docs/MODEL.md 4.6): the top k of n_experts by sigmoid(logit) + bias,
 * largest first, lowest index on ties, into ids; their weights the unbiased sigmoids renormalised
 * over their sum. */
void op_route(const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights);

#include <math.h>

#include "kernels/kernels.h"
static inline float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float op_dot(const float *a, const float *b, int n) { return kern_dot_f32(a, b, n); }
static inline void op_axpy(float *y, float a, const float *x, int n) { kern_axpy(y, a, x, n); }

#endif

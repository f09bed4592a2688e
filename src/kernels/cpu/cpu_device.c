/* cpu_device.c - the CPU device (cpu_device.h): its memory, products, norms, routing, gathers and
 * phase clock, and the operations table. KDA and MLA are in cpu_attention.c, the routed experts in
 * cpu_experts.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/config.h"
#include "kernels/cpu/cpu_int.h"
#include "kernels/mat.h"
#include "kernels/vecops.h"
#include "util/clock.h"
#include "util/err.h"

/* ---- memory: the host's ---- */

static void *cpu_alloc(MatDevice *d, size_t bytes) { return (void)d, df_calloc(1, bytes ? bytes : 1); }
static void cpu_release(MatDevice *d, void *p, size_t bytes) { (void)d, (void)bytes, free(p); }
static void cpu_copy(MatDevice *d, void *dst, const void *src, size_t bytes) {
    (void)d;
    if (bytes && dst != src) memmove(dst, src, bytes);
}
static int cpu_get(MatDevice *d, void *dst, const void *src, size_t bytes) { return cpu_copy(d, dst, src, bytes), 0; }
static int cpu_keep(MatDevice *d, const Mat *W) { return (void)d, (void)W, 0; }
static int cpu_holds(MatDevice *d, const Mat *W) { return (void)d, (void)W, 0; }

/* ---- products ---- */

void cpu_mul(CpuDevice *c, float *Y, const Mat *W, const float *X, int T) {
    if (c->products == CPU_PRODUCTS_CPU) mat_mul_cpu(c->pool, Y, W, X, T);
    else mat_mul(c->pool, Y, W, X, T);
}
static void cpu_op_mul(MatDevice *d, float *Y, const Mat *W, const float *X, int T) { cpu_mul(cpu_of(d), Y, W, X, T); }
static void cpu_op_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    CpuDevice *c = cpu_of(d);
    if (c->products == CPU_PRODUCTS_CPU) mat_mul_heads_cpu(c->pool, Y, W, hd, X, T);
    else mat_mul_heads(c->pool, Y, W, hd, X, T);
}
static void cpu_op_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    CpuDevice *c = cpu_of(d);
    if (c->products == CPU_PRODUCTS_CPU) mat_tmul_heads_cpu(c->pool, Y, W, hd, X, T);
    else mat_tmul_heads(c->pool, Y, W, hd, X, T);
}

/* ---- element-wise and per-row operations ---- */

static void cpu_rmsnorm(MatDevice *d, float *out, const float *x, const float *w, int n, int rows, size_t stride, float eps,
                        const float *gate) {
    (void)d;
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * stride;
        op_rmsnorm(o, x + (size_t)r * stride, w, n, eps);
        for (int i = 0; gate && i < n; i++) o[i] *= op_sigmoid(gate[(size_t)r * stride + i]);
    }
}

static void cpu_attnres(MatDevice *d, float *out, const float *anchors, int n_anchors, size_t anchor_stride, const float *p,
                        const float *q, int dim, int rows, float eps, float *scores) {
    const float *values[K3_MAX_LAYERS + 2];
    (void)d, (void)scores;
    for (int t = 0; t < rows; t++) {
        for (int a = 0; a < n_anchors; a++) values[a] = anchors + (size_t)a * anchor_stride + (size_t)t * dim;
        values[n_anchors] = p + (size_t)t * dim;
        op_attnres(out + (size_t)t * dim, values, n_anchors + 1, q, dim, eps);
    }
}

static void cpu_add(MatDevice *d, float *dst, const float *src, size_t n) {
    (void)d;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_gate(MatDevice *d, float *x, const float *g, size_t n) {
    (void)d;
    for (size_t i = 0; i < n; i++) x[i] *= op_sigmoid(g[i]);
}

/* SiTU in tasks of SITU_TASK elements: exact SiTU (kernels/exactmath.h) costs about 60 ns an
 * element, 5 M elements a token on K3, most of them in experts of 3,072 (which a decode step runs
 * one at a time: six tasks each). */
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

void cpu_situ(CpuDevice *c, float *a, const float *b, size_t n, float beta, float beta_lin) {
    SituTask j = {a, b, n, beta, beta_lin};
    const size_t tasks = (n + SITU_TASK - 1) / SITU_TASK;
    if (tasks > 0) pool_run(c->pool, (int)tasks, situ_task, &j);
}

static void cpu_op_situ(MatDevice *d, float *a, const float *b, size_t n, float beta, float beta_lin) {
    cpu_situ(cpu_of(d), a, b, n, beta, beta_lin);
}

static void cpu_route(MatDevice *d, const float *logits, const float *bias, int n_experts, int k, int rows, int *ids,
                      float *weights) {
    (void)d;
    for (int t = 0; t < rows; t++)
        op_route(logits + (size_t)t * n_experts, bias, n_experts, k, ids + (size_t)t * k, weights + (size_t)t * k);
}

static void cpu_gather(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width) {
    (void)d;
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * width, src + (size_t)idx[i] * width, sizeof(float) * (size_t)width);
}

static void cpu_scatter(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width) {
    (void)d;
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)idx[i] * width, src + (size_t)i * width, sizeof(float) * (size_t)width);
}

static void cpu_combine(MatDevice *d, float *y, const float *eo, const float *w, int k, int n, int rows) {
    (void)d;
    for (int t = 0; t < rows; t++) {
        float *yt = y + (size_t)t * n;
        for (int j = 0; j < n; j++) yt[j] = 0;
        for (int i = 0; i < k; i++) {
            const float *e = eo + ((size_t)t * k + i) * n, wt = w[(size_t)t * k + i];
            for (int j = 0; j < n; j++) yt[j] += wt * e[j];
        }
    }
}

/* ---- phases: wall-clock time between marks ---- */

static void cpu_mark(MatDevice *d, int phase) {
    CpuDevice *c = cpu_of(d);
    double now = df_now();
    if (c->phase_since > 0) c->secs[c->phase] += now - c->phase_since;
    c->phase = phase, c->phase_since = now;
}

static void cpu_phase_times(MatDevice *d, double *secs) {
    CpuDevice *c = cpu_of(d);
    for (int p = 0; p < DEV_N_PHASES; p++) secs[p] += c->secs[p], c->secs[p] = 0;
}

/* ---- what the CPU does not have: expert slots, recordings ---- */

static int cpu_expert_slots(MatDevice *d, size_t bytes, int want) { return (void)d, (void)bytes, (void)want, 0; }
static void cpu_slot_fill(MatDevice *d, int s, const Mat *w1, const Mat *w2, const Mat *w3) {
    (void)d, (void)s, (void)w1, (void)w2, (void)w3; /* (never called: there are no slots) */
}
static int cpu_fills_wait(MatDevice *d) { return (void)d, 0; }
static int cpu_record(MatDevice *d, int key) { return (void)d, (void)key, 0; }

static const DevOps cpu_ops = {
    .alloc = cpu_alloc, .release = cpu_release, .put = cpu_copy, .copy = cpu_copy, .get = cpu_get,
    .keep = cpu_keep, .holds = cpu_holds, .mul = cpu_op_mul, .mul_heads = cpu_op_mul_heads,
    .tmul_heads = cpu_op_tmul_heads, .rmsnorm = cpu_rmsnorm, .attnres = cpu_attnres, .add = cpu_add,
    .gate = cpu_gate, .situ = cpu_op_situ, .kda = cpu_op_kda, .mla = cpu_op_mla, .route = cpu_route,
    .experts = cpu_op_experts, .experts_rows = cpu_op_experts_rows, .gather = cpu_gather, .combine = cpu_combine,
    .mark = cpu_mark, .phase_times = cpu_phase_times, .expert_slots = cpu_expert_slots, .slot_fill = cpu_slot_fill,
    .fills_wait = cpu_fills_wait, .record = cpu_record, .mla_expanded = cpu_op_mla_expanded, .scatter = cpu_scatter,
};

/* ---- the MatDevice around them ---- */

static const char *cpu_fault(MatDevice *d) { return (void)d, NULL; }
static void cpu_counters(MatDevice *d, size_t *resident, size_t *streamed) { (void)d, *resident = 0, *streamed = 0; }
static void cpu_close(MatDevice *d) { (void)d; /* cpu_device_destroy frees it */ }
static void cpu_products_mul(MatDevice *d, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    (void)d, mat_mul_cpu(pool, Y, W, X, T);
}
static void cpu_products_mul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_mul_heads_cpu(pool, Y, W, hd, X, T);
}
static void cpu_products_tmul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X,
                                    int T) {
    (void)d, mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
}

MatDevice *cpu_device_create(Pool *pool, CpuProducts products) {
    CpuDevice *c = df_calloc(1, sizeof *c);
    MatDevice *d = &c->base;
    snprintf(d->desc, sizeof d->desc, "cpu (%d threads)", pool_threads(pool));
    d->mul = cpu_products_mul, d->mul_heads = cpu_products_mul_heads, d->tmul_heads = cpu_products_tmul_heads;
    d->fault = cpu_fault, d->counters = cpu_counters, d->close = cpu_close;
    d->expert_bytes = d->weight_room = SIZE_MAX;
    d->host_memory = 1;
    d->ops = &cpu_ops;
    c->pool = pool, c->products = products;
    return d;
}

void cpu_device_destroy(MatDevice *d) { free(d); }

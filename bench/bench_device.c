/* bench_device.c - matrix products on the process's device (K3_DEV: cpu or cuda), one shape at a
 * time: microseconds per mat_mul and the weight bytes per second they stand for, for a resident
 * weight (the same matrix and residency key every call: the spine) and for a weight whose bytes
 * are new at every use (an MXFP4 expert whose key's generation moves on each call, as a streaming
 * store's refilled cache slot does: the device copies it again), plus the fixed cost of a call
 * (a 16 x 16 product). Medians over the repetitions.
 *
 * On a device with whole-layer operations (devops.h) also: the same products with activations in
 * device memory, `reps` of them queued back to back and timed together (the rate a decode step
 * sees: no round trip per product), one layer's 16 experts in one launch, and 16 experts copied
 * from page-locked memory into expert slots on the copy stream: alone, beside queued products, and
 * those products alone (whether the copies overlap the compute stream's work).
 *
 * On the CUDA device, last: every product kernel variant (prod_cuda.cu: "auto" is the choice the
 * device makes, "generic" the kernel it falls back on, the rest the kernels auto chooses from) on
 * the products a K3 forward makes, T = 1 and the T > 1 of prefill chunks and verify passes: the
 * median of 5 rounds of queued launches timed by device events, the weight bytes per second (each
 * weight read once for all T rows) and their share of the H200's 4.8 TB/s, and whether every
 * output is bit-identical to the CPU kernels'; then the same check on weights at the edges of their
 * formats (every MXFP4 scale byte and code, BF16 infinities and NaNs, extreme I8ROW scales), where
 * a NaN must be NaN on both sides.
 *
 *   build-cuda/bench/bench_device [reps] [filter]   (K3_DEV=cuda; the same binary with K3_DEV=cpu)
 * With a filter, only the variant rows whose label contains it ("variants": all of them; "rows":
 * none, only the rows before them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cli/die.h"
#include "cli/settings.h"
#include "kernels/device.h"
#include "kernels/devops.h"
#include "kernels/mat.h"
#include "kernels/vecops.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/rng.h"

#ifdef DF_CUDA
#include "kernels/cuda/mat_cuda.h"
#endif

/* Random bytes for weights: BF16 words with a small exponent, int8 codes, E2M1 nibbles, scales. */
static void fill(uint8_t *p, size_t n, WeightFormat fmt, int aux, Rng *r) {
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(rng_next(r) >> 32);
        if (fmt == WF_BF16) p[i] = (i & 1) ? (uint8_t)(0x3c + (v & 1)) : (uint8_t)v;
        else if (aux && fmt == WF_MXFP4) p[i] = (uint8_t)(120 + v % 4);
        else p[i] = (uint8_t)v;
    }
}

/* The matrices stay allocated until the device closes: it keeps copies under their keys. */
static Mat kept[16];
#define MAX_VARIANT_JOBS 32
static int n_kept;
static uint32_t bench_store;

static Mat make_mat(WeightFormat fmt, int rows, int cols, Rng *r) {
    size_t n = (size_t)rows * cols, data = fmt == WF_BF16 ? 2 * n : fmt == WF_MXFP4 ? n / 2 : n;
    size_t aux = fmt == WF_MXFP4 ? n / 32 : fmt == WF_I8ROW ? 4 * (size_t)rows : 0;
    uint8_t *d = df_malloc(data), *a = aux ? df_malloc(aux) : NULL;
    fill(d, data, fmt, 0, r);
    if (fmt == WF_I8ROW)
        for (int i = 0; i < rows; i++) ((float *)a)[i] = 0.01f;
    else if (a) fill(a, aux, fmt, 1, r);
    return (Mat){fmt, rows, cols, d, a, {bench_store, 0, (uint64_t)n_kept, 0}};
}

/* Median time of mat_mul with W over reps calls (an MXFP4 W's generation moves on every call). */
static void time_mat(Pool *pool, const char *name, Mat *Wp, int T, int reps, Rng *r) {
    const int rows = Wp->rows, cols = Wp->cols;
    const WeightFormat fmt = Wp->fmt;
    float *X = df_malloc(sizeof(float) * (size_t)T * cols), *Y = df_malloc(sizeof(float) * (size_t)T * rows);
    for (size_t i = 0; i < (size_t)T * cols; i++) X[i] = (float)((uint32_t)(rng_next(r) >> 32) % 1000) / 1000.0f - 0.5f;
    Mat W = *Wp;
    double *t = df_malloc(sizeof(double) * (size_t)reps);
    mat_mul(pool, Y, &W, X, T); /* warm-up: a resident weight is copied here */
    for (int i = 0; i < reps; i++) {
        if (fmt == WF_MXFP4) W.key.gen++; /* a refilled cache slot: new bytes under the same item */
        double t0 = df_now();
        mat_mul(pool, Y, &W, X, T);
        t[i] = df_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    double med = t[reps / 2];
    printf("%-34s T=%-2d %8.1f us  %8.1f GB/s of weights\n", name, T, med * 1e6, mat_bytes(&W) / med / 1e9);
    *Wp = W;
    free(X), free(Y), free(t);
}

static void time_shape(Pool *pool, const char *name, WeightFormat fmt, int rows, int cols, int T, int reps, Rng *r) {
    kept[n_kept] = make_mat(fmt, rows, cols, r);
    time_mat(pool, name, &kept[n_kept++], T, reps, r);
}

/* reps products of W queued on device memory, timed from the first to the wait after the last; and
 * whether the product is bit-identical to the CPU kernels'. */
static void time_queued(MatDevice *dev, const char *name, const Mat *W, int reps, Rng *r) {
    const DevOps *o = dev->ops;
    float *x = o->alloc(dev, sizeof(float) * (size_t)W->cols), *y = o->alloc(dev, sizeof(float) * (size_t)W->rows);
    float *hx = df_malloc(sizeof(float) * (size_t)W->cols), *hy = df_malloc(sizeof(float) * (size_t)W->rows);
    float *want = df_malloc(sizeof(float) * (size_t)W->rows);
    if (!x || !y) df_die("%s", df_errmsg());
    for (int i = 0; i < W->cols; i++) hx[i] = (float)((uint32_t)(rng_next(r) >> 32) % 2001) / 1000.0f - 1.0f;
    o->put(dev, x, hx, sizeof(float) * (size_t)W->cols);
    o->mul(dev, y, W, x, 1); /* warm-up, and the check */
    if (o->get(dev, hy, y, sizeof(float) * (size_t)W->rows)) df_die("%s", df_errmsg());
    mat_mul_cpu(NULL, want, W, hx, 1);
    int same = !memcmp(hy, want, sizeof(float) * (size_t)W->rows);
    free(hx), free(hy), free(want);
    double t0 = df_now();
    for (int i = 0; i < reps; i++) o->mul(dev, y, W, x, 1);
    if (o->get(dev, NULL, NULL, 0)) df_die("%s", df_errmsg());
    double per = (df_now() - t0) / reps;
    printf("%-34s queued   %8.1f us  %8.1f GB/s of weights  (%s the CPU's)\n", name, per * 1e6, mat_bytes(W) / per / 1e9,
           same ? "bit-identical to" : "DIFFERENT from");
    o->release(dev, x, sizeof(float) * (size_t)W->cols), o->release(dev, y, sizeof(float) * (size_t)W->rows);
}

/* One layer's routed experts (16 of 3072 x 3584 MXFP4, resident) in one launch each time. */
static void time_experts(MatDevice *dev, int reps, Rng *r) {
    enum { K = 16, INTER = 3072, LATENT = 3584 };
    const DevOps *o = dev->ops;
    Mat w[3][K];
    const Mat *p[3][K];
    int slot[K];
    for (int i = 0; i < K; i++) {
        for (int m = 0; m < 3; m++) {
            w[m][i] = m == 1 ? make_mat(WF_MXFP4, LATENT, INTER, r) : make_mat(WF_MXFP4, INTER, LATENT, r);
            w[m][i].key.item = 1000 + 3 * (uint64_t)i + (uint64_t)m; /* each its own key */
            p[m][i] = &w[m][i];
            if (!o->keep(dev, p[m][i])) df_die("experts do not fit on the device");
        }
        slot[i] = i;
    }
    float *z = o->alloc(dev, sizeof(float) * LATENT), *h = o->alloc(dev, sizeof(float) * 2 * K * INTER);
    float *out = o->alloc(dev, sizeof(float) * K * LATENT);
    if (!z || !h || !out) df_die("%s", df_errmsg());
    o->experts(dev, p[0], p[1], p[2], slot, NULL, K, z, h, out, 4.0f, 25.0f, 1);
    if (o->get(dev, NULL, NULL, 0)) df_die("%s", df_errmsg());
    double t0 = df_now();
    for (int i = 0; i < reps; i++) o->experts(dev, p[0], p[1], p[2], slot, NULL, K, z, h, out, 4.0f, 25.0f, 1);
    if (o->get(dev, NULL, NULL, 0)) df_die("%s", df_errmsg());
    double per = (df_now() - t0) / reps;
    double bytes = 3.0 * K * mat_bytes(&w[0][0]);
    /* expert 5 on the CPU kernels, from the same input */
    float *hz = df_malloc(sizeof(float) * LATENT), *h1 = df_malloc(sizeof(float) * INTER), *h3 = df_malloc(sizeof(float) * INTER);
    float *want = df_malloc(sizeof(float) * LATENT), *got = df_malloc(sizeof(float) * LATENT);
    for (int i = 0; i < LATENT; i++) hz[i] = (float)((uint32_t)(rng_next(r) >> 32) % 2001) / 1000.0f - 1.0f;
    o->put(dev, z, hz, sizeof(float) * LATENT);
    o->experts(dev, p[0], p[1], p[2], slot, NULL, K, z, h, out, 4.0f, 25.0f, 1);
    if (o->get(dev, got, out + 5 * LATENT, sizeof(float) * LATENT)) df_die("%s", df_errmsg());
    mat_mul_cpu(NULL, h1, p[0][5], hz, 1), mat_mul_cpu(NULL, h3, p[2][5], hz, 1);
    for (int i = 0; i < INTER; i++) h1[i] = op_situ(h1[i], h3[i], 4.0f, 25.0f);
    mat_mul_cpu(NULL, want, p[1][5], h1, 1);
    double err = 0, mx = 0;
    for (int i = 0; i < LATENT; i++) {
        double e = fabs((double)got[i] - want[i]);
        err = e > err ? e : err, mx = fabs(want[i]) > mx ? fabs(want[i]) : mx;
    }
    printf("  (an expert against the CPU: max |gpu - cpu| %.2e of values up to %.2e: SiTU's tanhf/expf)\n", err, mx);
    free(hz), free(h1), free(h3), free(want), free(got);
    printf("%-34s queued   %8.1f us  %8.1f GB/s of weights\n", "16 experts MXFP4, one launch", per * 1e6, bytes / per / 1e9);
    o->release(dev, z, sizeof(float) * LATENT), o->release(dev, h, sizeof(float) * 2 * K * INTER);
    o->release(dev, out, sizeof(float) * K * LATENT);
    for (int i = 0; i < K; i++)
        for (int m = 0; m < 3; m++) free((void *)w[m][i].data), free((void *)w[m][i].aux);
}

/* 16 experts copied from page-locked host memory into expert slots (the copy stream), alone; the
 * products of W queued for about as long, alone; and both at once. Medians over reps rounds. */
static void time_slot_copies(MatDevice *dev, const Mat *W, int reps, Rng *r) {
    enum { K = 16, INTER = 3072, LATENT = 3584 };
    const DevOps *o = dev->ops;
    Mat w[3][K];
    for (int i = 0; i < K; i++)
        for (int m = 0; m < 3; m++) {
            w[m][i] = m == 1 ? make_mat(WF_MXFP4, LATENT, INTER, r) : make_mat(WF_MXFP4, INTER, LATENT, r);
            w[m][i].key.item = 2000 + 3 * (uint64_t)i + (uint64_t)m;
            dev->host_buffer(dev, (void *)w[m][i].data, (size_t)INTER * LATENT / 2);
            dev->host_buffer(dev, (void *)w[m][i].aux, (size_t)INTER * LATENT / 32);
        }
    const size_t expert = 3 * mat_bytes(&w[0][0]);
    if (o->expert_slots(dev, expert, K) < K) {
        printf("expert slots: no room for %d\n", K);
        return;
    }
    float *x = o->alloc(dev, sizeof(float) * (size_t)W->cols), *y = o->alloc(dev, sizeof(float) * (size_t)W->rows);
    if (!x || !y) df_die("%s", df_errmsg());
    const int n_mul = (int)(expert * K / 50e9 / (mat_bytes(W) / 3.5e12)) + 1; /* about the copies' time at 50 GB/s */
    double t[3][64];
    const int rounds = reps < 64 ? reps : 64;
    for (int round = 0; round < rounds; round++)
        for (int way = 0; way < 3; way++) { /* copies, products, both */
            double t0 = df_now();
            for (int i = 0; way > 0 && i < n_mul; i++) o->mul(dev, y, W, x, 1);
            for (int i = 0; way != 1 && i < K; i++) o->slot_fill(dev, i, &w[0][i], &w[1][i], &w[2][i]);
            if (o->fills_wait(dev) || o->get(dev, NULL, NULL, 0)) df_die("%s", df_errmsg());
            t[way][round] = df_now() - t0;
        }
    for (int way = 0; way < 3; way++) qsort(t[way], (size_t)rounds, sizeof(double), bench_cmp_double);
    const double copies = t[0][rounds / 2], muls = t[1][rounds / 2], both = t[2][rounds / 2];
    printf("%-34s copy     %8.1f us  %8.1f GB/s (page-locked, the copy stream)\n", "16 experts into expert slots", copies * 1e6,
           expert * K / copies / 1e9);
    printf("%-34s          %8.1f us; both at once %.1f us (%.0f%% of the sum: 50%% is full overlap)\n", "  beside products (alone)",
           muls * 1e6, both * 1e6, 100 * both / (copies + muls));
    o->expert_slots(dev, 0, 0);
    o->release(dev, x, sizeof(float) * (size_t)W->cols), o->release(dev, y, sizeof(float) * (size_t)W->rows);
    for (int i = 0; i < K; i++)
        for (int m = 0; m < 3; m++) free((void *)w[m][i].data), free((void *)w[m][i].aux);
}

#ifdef DF_CUDA
#define HBM_BYTES_PER_S 4.8e12 /* the H200's HBM bandwidth by its datasheet: the rates' yardstick */

static uint64_t variant_item = 5000; /* residency keys of the variant rows' matrices */

/* A matrix of random weights (as make_mat) under a key of its own, kept until the process ends. */
static Mat variant_mat(WeightFormat fmt, int rows, int cols, Rng *r) {
    Mat m = make_mat(fmt, rows, cols, r);
    m.key.item = variant_item++;
    return m;
}

/* Differing outputs: not the same bits, unless NaN on both sides (the GPU returns its canonical
 * NaN, the CPU's SIMD paths propagate payloads). *nans: outputs NaN on both. */
static size_t count_differ(const float *a, const float *b, size_t n, size_t *nans) {
    size_t bad = 0;
    *nans = 0;
    for (size_t i = 0; i < n; i++) {
        const int na = isnan(a[i]) != 0, nb = isnan(b[i]) != 0;
        if (na || nb) *nans += na && nb, bad += !(na && nb);
        else bad += memcmp(a + i, b + i, sizeof(float)) != 0;
    }
    return bad;
}

/* Every kernel variant that takes n products of W[0]'s shape with the T rows of X: with reps > 0
 * the median of 5 rounds of reps launches and the rate; always whether the outputs are those of
 * the CPU kernels. */
static void run_variants(MatDevice *dev, Pool *pool, const char *label, const Mat *const *W, int n, int T,
                         const float *X, int reps) {
    const size_t per = (size_t)T * (size_t)W[0]->rows;
    float *want = df_malloc(sizeof(float) * per * (size_t)n), *got = df_malloc(sizeof(float) * per * (size_t)n);
    for (int i = 0; i < n; i++) mat_mul_cpu(pool, want + (size_t)i * per, W[i], X, T);
    const double bytes = (double)n * (double)mat_bytes(W[0]);
    for (int v = 0; cuda_variant_name(v); v++) {
        double secs = 0;
        const int rc = cuda_time_variant(dev, v, W, n, X, T, reps > 0 ? reps : 1, reps > 0 ? 5 : 1, got, &secs);
        if (rc < 0) df_die("%s", df_errmsg());
        if (rc) continue;
        size_t nans = 0, bad = count_differ(want, got, per * (size_t)n, &nans);
        char verdict[96];
        if (bad) snprintf(verdict, sizeof verdict, "DIFFERENT: %zu of %zu outputs", bad, per * (size_t)n);
        else snprintf(verdict, sizeof verdict, "bit-identical%s", nans ? " (NaN on both sides where NaN)" : "");
        if (reps > 0)
            printf("%-30s T=%-2d %-20s %8.1f us %5.2f TB/s %3.0f%%  %s\n", label, T, cuda_variant_name(v), secs * 1e6,
                   bytes / secs / 1e12, 100 * bytes / secs / HBM_BYTES_PER_S, verdict);
        else printf("%-30s T=%-2d %-20s %s\n", label, T, cuda_variant_name(v), verdict);
    }
    free(want), free(got);
}

static float *random_x(int T, int cols, Rng *r) {
    float *X = df_malloc(sizeof(float) * (size_t)T * (size_t)cols);
    for (size_t i = 0; i < (size_t)T * (size_t)cols; i++) X[i] = rng_sym(r);
    return X;
}

static int wanted(const char *filter, const char *label) {
    return !filter || !strcmp(filter, "variants") || strstr(label, filter);
}

/* n products of rows x cols in fmt, each T in Ts (0-terminated), timed. */
static void variant_case(MatDevice *dev, Pool *pool, const char *filter, const char *label, WeightFormat fmt, int rows,
                         int cols, int n, const int *Ts, int reps, Rng *r) {
    if (!wanted(filter, label)) return;
    Mat W[MAX_VARIANT_JOBS];
    const Mat *p[MAX_VARIANT_JOBS];
    for (int i = 0; i < n; i++) W[i] = variant_mat(fmt, rows, cols, r), p[i] = &W[i];
    for (const int *T = Ts; *T; T++) {
        float *X = random_x(*T, cols, r);
        run_variants(dev, pool, label, p, n, *T, X, reps);
        free(X);
    }
    for (int i = 0; i < n; i++) free((void *)W[i].data), free((void *)W[i].aux);
}

/* Columns of the MXFP4 edge matrices: rows of 256 bytes, which every kernel takes (the coop kernel
 * reads rows in segments of up to 256 bytes). */
#define EDGE_MX_COLS 512

/* Weights at the edges of their formats through every variant, T = 1, 3 and 17 (two launches). */
static void check_edges(MatDevice *dev, Pool *pool, Rng *r) {
    static const int Ts[] = {1, 3, 17};
    /* MXFP4: row r holds code r % 16 under scale byte r / 16 in one column, zeros elsewhere: with X
     * all ones each output is that weight expanded (every scale byte and code, NaN and infinity) */
    Mat one = variant_mat(WF_MXFP4, 4096, EDGE_MX_COLS, r);
    uint8_t *d = (uint8_t *)one.data, *a = (uint8_t *)one.aux;
    memset(d, 0, (size_t)4096 * EDGE_MX_COLS / 2);
    for (int row = 0; row < 4096; row++) {
        const int c = (row * 7) % EDGE_MX_COLS, code = row % 16;
        d[row * EDGE_MX_COLS / 2 + c / 2] |= (uint8_t)(c & 1 ? code << 4 : code);
        memset(a + (size_t)row * EDGE_MX_COLS / 32, row / 16, EDGE_MX_COLS / 32);
    }
    /* MXFP4 with random codes and scale bytes; BF16 with random bit patterns; I8ROW under extreme scales */
    Mat mx = variant_mat(WF_MXFP4, 4096, EDGE_MX_COLS, r), bf = variant_mat(WF_BF16, 1024, 256, r), i8 = variant_mat(WF_I8ROW, 1024, 256, r);
    for (size_t i = 0; i < (size_t)4096 * EDGE_MX_COLS / 32; i++) ((uint8_t *)mx.aux)[i] = (uint8_t)(rng_next(r) >> 56);
    for (size_t i = 0; i < (size_t)1024 * 256; i++) ((uint16_t *)bf.data)[i] = (uint16_t)(rng_next(r) >> 48);
    static const float scales[] = {0.0f, -0.0f, 1e-45f, 1.2e-40f, 1.17549435e-38f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN,
                                   0.01f, -1.5f};
    for (int i = 0; i < 1024; i++) ((float *)i8.aux)[i] = scales[i % (int)(sizeof scales / sizeof scales[0])];
    const Mat *cases[] = {&one, &mx, &bf, &i8};
    const char *labels[] = {"edges: MXFP4 every scale, code", "edges: MXFP4 random scales", "edges: BF16 every pattern",
                            "edges: I8ROW extreme scales"};
    for (int k = 0; k < 4; k++)
        for (int t = 0; t < 3; t++) {
            float *X = random_x(Ts[t], cases[k]->cols, r);
            if (k == 0)
                for (size_t i = 0; i < (size_t)Ts[t] * EDGE_MX_COLS; i++) X[i] = 1.0f;
            run_variants(dev, pool, labels[k], &cases[k], 1, Ts[t], X, 0);
            free(X);
        }
    for (int k = 0; k < 4; k++) free((void *)cases[k]->data), free((void *)cases[k]->aux);
}

/* The variant rows: K3's products (hidden 7168; the head's 32768-row stand-in; attention's 12288
 * rows; the small projections of 128, 96 and 576 rows; a layer's 16 routed experts, gate and up in
 * one launch of 32, down in one of 16), at T = 1 and the T of prefill chunks and verify passes. */
static void time_all_variants(MatDevice *dev, Pool *pool, const char *filter, int reps, Rng *r) {
    static const int t1[] = {1, 0}, tmany[] = {1, 2, 4, 8, 16, 0}, tsome[] = {1, 4, 16, 0};
    variant_case(dev, pool, filter, "BF16 32768 x 7168", WF_BF16, 32768, 7168, 1, t1, reps, r);
    variant_case(dev, pool, filter, "BF16 12288 x 7168", WF_BF16, 12288, 7168, 1, tmany, reps, r);
    variant_case(dev, pool, filter, "BF16 4096 x 7168", WF_BF16, 4096, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "BF16 1536 x 7168", WF_BF16, 1536, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "BF16 576 x 7168", WF_BF16, 576, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "BF16 128 x 7168", WF_BF16, 128, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "BF16 96 x 7168", WF_BF16, 96, 7168, 1, t1, reps, r);
    variant_case(dev, pool, filter, "I8ROW 12288 x 7168", WF_I8ROW, 12288, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "I8ROW 1536 x 7168", WF_I8ROW, 1536, 7168, 1, tsome, reps, r);
    variant_case(dev, pool, filter, "MXFP4 3072 x 3584", WF_MXFP4, 3072, 3584, 1, t1, reps, r);
    variant_case(dev, pool, filter, "16 experts gate+up, 32 x 3072 x 3584", WF_MXFP4, 3072, 3584, 32, tmany, reps, r);
    variant_case(dev, pool, filter, "16 experts down, 16 x 3584 x 3072", WF_MXFP4, 3584, 3072, 16, tsome, reps, r);
    if (wanted(filter, "edges")) check_edges(dev, pool, r);
}
#endif

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    const char *filter = argc > 2 ? argv[2] : NULL; /* the variant rows: CUDA only */
    if (reps < 1) reps = 1;
#ifndef DF_CUDA
    (void)filter;
#endif
    Settings set; /* K3_DEV, K3_THREADS */
    DeviceKind kind;
    if (settings_from_env(&set) || device_resolve(set.engine.device, &kind) || device_open(kind)) df_die("%s", df_errmsg());
    MatDevice *dev = device_current();
    printf("device: %s\n", dev ? dev->desc : "cpu");
    Pool *pool = pool_create(set.engine.threads);
    bench_store = mat_store_id();
    Rng r;
    rng_seed(&r, 7);
#ifdef DF_CUDA
    if (filter && dev && strcmp(filter, "rows")) {
        time_all_variants(dev, pool, filter, reps, &r);
        pool_destroy(pool);
        device_close();
        return 0;
    }
#endif
    time_shape(pool, "call cost (16 x 16 f32)", WF_F32, 16, 16, 1, reps, &r);
    time_shape(pool, "lm_head-like BF16 32768 x 7168", WF_BF16, 32768, 7168, 1, reps, &r);
    time_shape(pool, "q_proj-like BF16 12288 x 7168", WF_BF16, 12288, 7168, 1, reps, &r);
    time_shape(pool, "q_proj-like BF16 12288 x 7168", WF_BF16, 12288, 7168, 8, reps, &r);
    time_shape(pool, "q_proj-like I8ROW 12288 x 7168", WF_I8ROW, 12288, 7168, 1, reps, &r);
    time_shape(pool, "expert MXFP4 3072 x 3584", WF_MXFP4, 3072, 3584, 1, reps, &r);
    if (dev) { /* the same from page-locked memory (the streaming store's cache, a registered mapping) */
        Mat W = make_mat(WF_MXFP4, 3072, 3584, &r);
        dev->host_buffer(dev, (void *)W.data, mat_bytes(&W));
        dev->host_buffer(dev, (void *)W.aux, (size_t)3072 * 3584 / 32);
        kept[n_kept++] = W;
        time_mat(pool, "expert MXFP4, page-locked", &kept[n_kept - 1], 1, reps, &r);
    }
    if (dev && dev->ops) {
        for (int i = 1; i < n_kept; i++)
            if (kept[i].fmt != WF_MXFP4) {
                char name[64];
                snprintf(name, sizeof name, "%s %d x %d", kept[i].fmt == WF_BF16 ? "BF16" : "I8ROW", kept[i].rows, kept[i].cols);
                time_queued(dev, name, &kept[i], reps * 5, &r);
            }
        time_experts(dev, reps * 5, &r);
        time_slot_copies(dev, &kept[1], reps, &r);
    }
#ifdef DF_CUDA
    if (dev && !filter) time_all_variants(dev, pool, NULL, reps, &r);
#endif
    if (dev) {
        size_t res, str;
        dev->counters(dev, &res, &str);
        printf("device memory: %.2f GB resident, %.2f GB copied for single uses\n", res / 1e9, str / 1e9);
    }
    pool_destroy(pool);
    device_close();
    for (int i = 0; i < n_kept; i++) free((void *)kept[i].data), free((void *)kept[i].aux);
    return 0;
}

/* mat.c - the Mat seam (mat.h): products dispatched to the process's device, their CPU versions,
 * and exact expansion of weights to fp32. */
#include "kernels/mat.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "format/numfmt.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

uint32_t mat_store_id(void) {
    static atomic_uint next = 1;
    return atomic_fetch_add(&next, 1);
}

int mat_key_equal(const MatKey *a, const MatKey *b) {
    return a->store && a->store == b->store && a->part == b->part && a->item == b->item && a->gen == b->gen;
}

void mat_mul(Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    MatDevice *dev = device_current();
    if (dev) dev->mul(dev, pool, Y, W, X, T);
    else mat_mul_cpu(pool, Y, W, X, T);
}

void mat_mul_heads(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    MatDevice *dev = device_current();
    if (dev) dev->mul_heads(dev, pool, Y, W, hd, X, T);
    else mat_mul_heads_cpu(pool, Y, W, hd, X, T);
}

void mat_tmul_heads(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    MatDevice *dev = device_current();
    if (dev) dev->tmul_heads(dev, pool, Y, W, hd, X, T);
    else mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
}

void mat_mul_cpu(Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    switch (W->fmt) {
    case WF_BF16: kern_matmul_bf16(pool, Y, W->data, X, T, W->rows, W->cols); break;
    case WF_F32: kern_matmul_f32(pool, Y, W->data, X, T, W->rows, W->cols); break;
    case WF_MXFP4: kern_matmul_mxfp4(pool, Y, W->data, W->aux, X, T, W->rows, W->cols); break;
    case WF_I8ROW: kern_matmul_i8row(pool, Y, W->data, W->aux, X, T, W->rows, W->cols); break;
    }
}

Mat mat_rows(const Mat *W, int row0, int n) {
    const uint8_t *d = W->data, *a = W->aux;
    size_t r = (size_t)row0, cols = (size_t)W->cols;
    Mat v = *W;
    v.rows = n;
    memset(&v.key, 0, sizeof v.key); /* a view is not the item its key names */
    switch (W->fmt) {
    case WF_BF16: v.data = d + r * cols * 2; break;
    case WF_F32: v.data = d + r * cols * 4; break;
    case WF_MXFP4: v.data = d + r * cols / 2, v.aux = a + r * cols / 32; break;
    case WF_I8ROW: v.data = d + r * cols, v.aux = a + r * 4; break;
    }
    return v;
}

void kern_axpy(float *restrict y, float a, const float *restrict w, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) /* fixed-length blocks: the compiler vectorises them */
        for (int k = 0; k < 8; k++) y[i + k] += a * w[i + k];
    for (; i < n; i++) y[i] += a * w[i];
}

/* Weights [from, from + n) of row j of v, expanded exactly to fp32 (as the kernels expand them). */
static void expand_row(const Mat *v, int j, int from, int n, float *restrict out) {
    const size_t at = (size_t)j * (size_t)v->cols + (size_t)from;
    switch (v->fmt) {
    case WF_F32: memcpy(out, (const float *)v->data + at, sizeof *out * (size_t)n); break;
    case WF_BF16: {
        const uint16_t *w = (const uint16_t *)v->data + at;
        for (int i = 0; i < n; i++) out[i] = bf16_to_f32(w[i]);
        break;
    }
    case WF_I8ROW: {
        const int8_t *q = (const int8_t *)v->data + at;
        float s;
        memcpy(&s, (const uint8_t *)v->aux + 4 * (size_t)j, sizeof s);
        for (int i = 0; i < n; i++) out[i] = (float)q[i] * s;
        break;
    }
    case WF_MXFP4: {
        const uint8_t *p = v->data, *scales = v->aux;
        for (int i = 0; i < n; i++) {
            size_t c = at + (size_t)i;
            uint8_t code = (c & 1) ? (uint8_t)(p[c / 2] >> 4) : (uint8_t)(p[c / 2] & 0xF);
            out[i] = mxfp4_e2m1[code] * kern_e8m0_table.f[scales[c / 32]];
        }
        break;
    }
    }
}

void mat_gather_rows(const Mat *W, const int *rows, int n, float *out) {
    for (int i = 0; i < n; i++) expand_row(W, rows[i], 0, W->cols, out + (size_t)i * (size_t)W->cols);
}

void mat_expand(const Mat *W, float *out) {
    for (int j = 0; j < W->rows; j++) expand_row(W, j, 0, W->cols, out + (size_t)j * (size_t)W->cols);
}

/* y[cols] = x[n] . W[row0 .. row0+n): one thread, summed row by row in order. */
static void rows_tmul(const Mat *W, int row0, int n, const float *x, float *y) {
    enum { BLOCK = 256 };
    const Mat v = mat_rows(W, row0, n);
    float w[BLOCK];
    memset(y, 0, sizeof *y * (size_t)W->cols);
    for (int j = 0; j < n; j++)
        for (int from = 0; from < W->cols; from += BLOCK) {
            int len = W->cols - from < BLOCK ? W->cols - from : BLOCK;
            expand_row(&v, j, from, len, w);
            kern_axpy(y + from, x[j], w, len);
        }
}

typedef struct {
    float *Y;
    const Mat *W;
    const MatHeads *hd;
    const float *X;
    int T;
} HeadsJob;

/* One head's rows for every t: its block as a matrix of its own, one T = 1 product per row. */
static void mul_head(void *ctx, int h) {
    const HeadsJob *j = ctx;
    const MatHeads *hd = j->hd;
    const Mat v = mat_rows(j->W, hd->row0 + h * hd->stride, hd->n);
    for (int t = 0; t < j->T; t++) {
        size_t at = (size_t)t * (size_t)hd->heads + (size_t)h;
        mat_mul_cpu(NULL, j->Y + at * (size_t)hd->n, &v, j->X + at * (size_t)hd->x_stride, 1);
    }
}

static void tmul_head(void *ctx, int h) {
    const HeadsJob *j = ctx;
    const MatHeads *hd = j->hd;
    for (int t = 0; t < j->T; t++) {
        size_t at = (size_t)t * (size_t)hd->heads + (size_t)h;
        rows_tmul(j->W, hd->row0 + h * hd->stride, hd->n, j->X + at * (size_t)hd->x_stride,
                  j->Y + at * (size_t)j->W->cols);
    }
}

/* The pool, or NULL where the heads' work is too small to share (the kernels' own rule). */
static Pool *heads_pool(Pool *pool, const Mat *W, const MatHeads *hd, int T) {
    uint64_t macs = (uint64_t)T * (uint64_t)hd->heads * (uint64_t)hd->n * (uint64_t)W->cols;
    return macs >= KERN_PARALLEL_MIN_MACS ? pool : NULL;
}

void mat_mul_heads_cpu(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    HeadsJob j = {Y, W, hd, X, T};
    pool_run(heads_pool(pool, W, hd, T), hd->heads, mul_head, &j);
}

void mat_tmul_heads_cpu(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    HeadsJob j = {Y, W, hd, X, T};
    pool_run(heads_pool(pool, W, hd, T), hd->heads, tmul_head, &j);
}

uint64_t mat_bytes(const Mat *W) {
    uint64_t n = (uint64_t)W->rows * (uint64_t)W->cols;
    switch (W->fmt) {
    case WF_BF16: return n * 2;
    case WF_F32: return n * 4;
    case WF_MXFP4: return n / 2 + n / 32;
    case WF_I8ROW: return n + 4 * (uint64_t)W->rows;
    }
    return 0;
}

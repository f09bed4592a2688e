#include "kernels/mat.h"

#include <stdlib.h>
#include <string.h>

#include "format/numfmt.h"
#include "kernels/device.h"
#include "kernels/kernels.h"

void mat_mul(Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    MatDevice *dev = device_current();
    if (dev) dev->mul(dev, pool, Y, W, X, T);
    else mat_mul_cpu(pool, Y, W, X, T);
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

/* Weights [from, from + n) of row j of v, expanded exactly to fp32. */
static void expand_row(const Mat *v, int j, int from, int n, float *restrict out) {
    const size_t at = (size_t)j * (size_t)v->cols + (size_t)from;
    if (v->fmt == WF_F32) {
        memcpy(out, (const float *)v->data + at, sizeof *out * (size_t)n);
    } else if (v->fmt == WF_BF16) {
        const uint16_t *w = (const uint16_t *)v->data + at;
        for (int i = 0; i < n; i++) out[i] = bf16_to_f32(w[i]);
    } else if (v->fmt == WF_I8ROW) {
        const int8_t *q = (const int8_t *)v->data + at;
        float s;
        memcpy(&s, (const uint8_t *)v->aux + 4 * (size_t)j, sizeof s);
        for (int i = 0; i < n; i++) out[i] = (float)q[i] * s;
    } else {
        abort(); /* MXFP4 is an expert format: never a kv_b matrix */
    }
}

void mat_rows_tmul(const Mat *W, int row0, int n, const float *x, float *y) {
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

#include "kernels/mat.h"

#include "kernels/kernels.h"

void mat_mul(Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    switch (W->fmt) {
    case WF_BF16: kern_matmul_bf16(pool, Y, W->data, X, T, W->rows, W->cols); break;
    case WF_F32: kern_matmul_f32(pool, Y, W->data, X, T, W->rows, W->cols); break;
    case WF_MXFP4: kern_matmul_mxfp4(pool, Y, W->data, W->aux, X, T, W->rows, W->cols); break;
    case WF_I8ROW: kern_matmul_i8row(pool, Y, W->data, W->aux, X, T, W->rows, W->cols); break;
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

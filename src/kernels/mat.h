/* mat.h - a weight matrix as the model sees it: a format, a shape and where its bytes are.
 *
 * This is the seam between the model and the compute backend: model code multiplies activations
 * by Mats through mat_mul and never looks at a weight's storage format; mat_mul runs on the
 * process's device (device.h): the CPU kernels or an accelerator. A Mat does not own its
 * bytes; they belong to whichever store produced it (mapped shard, spine buffer, expert cache)
 * and stay valid as long as that store says. */
#ifndef DF_MAT_H
#define DF_MAT_H

#include <stdint.h>

#include "util/pool.h"

#ifdef __cplusplus /* the CUDA device (C++ by nvcc) falls back to mat_mul_cpu */
extern "C" {
#endif

typedef enum {
    WF_BF16,  /* data: uint16 [rows][cols] */
    WF_F32,   /* data: float  [rows][cols] */
    WF_MXFP4, /* data: E2M1 nibbles [rows][cols/2], aux: E8M0 scales [rows][cols/32] */
    WF_I8ROW, /* data: int8 [rows][cols], aux: fp32 scale [rows]; weight = (float)q * scale (lossy spine) */
} WeightFormat;

typedef struct {
    WeightFormat fmt;
    int rows, cols;
    const void *data;
    const void *aux;
} Mat;

/* Y[T][rows] = X[T][cols] . W^T, exact weight expansion, fp32 accumulation, deterministic for
 * any thread count (see kernels.h). */
void mat_mul(Pool *pool, float *Y, const Mat *W, const float *X, int T);
/* The same on the CPU kernels whatever the device (device.h): for products too small to ship to
 * an accelerator, and callable from inside pool tasks (pool NULL there). Same bits. */
void mat_mul_cpu(Pool *pool, float *Y, const Mat *W, const float *X, int T);

/* Rows [row0, row0 + n) of W as a matrix of their own (same format, same bytes). */
Mat mat_rows(const Mat *W, int row0, int n);

/* y[cols] = x[n] . W[row0 .. row0+n) : the transposed product over a block of rows, one thread,
 * summed row by row in order (deterministic). Exact weight expansion as in mat_mul; BF16, F32
 * and I8ROW only (the spine's formats). */
void mat_rows_tmul(const Mat *W, int row0, int n, const float *x, float *y);

/* Bytes of weight data the matrix occupies (for I/O accounting). */
uint64_t mat_bytes(const Mat *W);

#ifdef __cplusplus
}
#endif

#endif

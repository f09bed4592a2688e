/* kernels.h - matrix kernels for every weight format the model reads.
 *
 * All kernels compute Y[t][r] = sum_c W[r][c] * X[t][c] for t < T, with W row-major [rows][cols]
 * in its storage format, expanded exactly to fp32 and accumulated in fp32. Each output element is
 * reduced by one thread in a fixed order (fixed lane split, fixed final sum), so results are
 * bit-identical for any thread count. The AVX-512, AVX2/FMA, NEON and portable paths use the same
 * lane structure and fused multiply-adds, so they agree bit-for-bit too (an ARM build computes what
 * an x86 build computes). Each format gives exactly what
 * the F32 kernel gives on its dequantised weights.
 *
 * For T > 1 the kernels walk each weight row once per chunk of X rows (the weight is the large
 * operand: read it once, reuse it from cache for all T); row t of Y is bit-identical to what a
 * T = 1 call on row t of X gives, so prefill equals decode. Pointers need no particular alignment.
 * `pool` may be NULL (single-threaded). */
#ifndef DF_KERNELS_H
#define DF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "util/pool.h"

void kern_matmul_bf16(Pool *pool, float *Y, const uint16_t *W, const float *X, int T, int rows, int cols);
void kern_matmul_f32(Pool *pool, float *Y, const float *W, const float *X, int T, int rows, int cols);
/* packed: [rows][cols/2] E2M1 nibbles, scales: [rows][cols/32] E8M0; cols % 32 == 0. */
void kern_matmul_mxfp4(Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales,
                       const float *X, int T, int rows, int cols);
/* W: int8 [rows][cols], scales: fp32 [rows]; weight = (float)W[r][c] * scales[r] (kern_i8row.c). */
void kern_matmul_i8row(Pool *pool, float *Y, const int8_t *W, const float *scales, const float *X, int T, int rows,
                       int cols);

/* y[i] += a * x[i]: element-wise (one product, one sum each), so every vector width gives the
 * same bits. */
void kern_axpy(float *restrict y, float a, const float *restrict x, int n);

/* Dot product with the kernels' reduction order (for small ops that must match the kernels). */
float kern_dot_f32(const float *a, const float *b, int n);

/* Chooses the implementation, before the first product: "auto" (or NULL: the widest the CPU
 * supports, what the first product picks when nothing was chosen), "avx512", "avx2" (x86-64),
 * "neon" (AArch64) or "portable". Returns 0, or -1 with a message for another name or one this
 * build lacks or this CPU cannot run. */
int kern_select(const char *name);
/* Which implementation runs: "avx512", "avx2", "neon" or "portable". All give bit-identical
 * results; the exact reduction order is written down in kernels_impl.h. */
const char *kern_isa(void);
/* The implementations this binary has and which of them this CPU runs, for --version:
 * "avx512 avx2 portable (this CPU: avx2 portable)", "neon portable (this CPU: neon portable)". */
void kern_describe(char *buf, size_t n);

#endif

/* kernels.h - matrix kernels for every weight format the model reads.
 *
 * All kernels compute Y[t][r] = sum_c W[r][c] * X[t][c] for t < T, with W row-major [rows][cols]
 * in its storage format, expanded exactly to fp32 and accumulated in fp32. Each output element is
 * reduced by one thread in a fixed order (fixed lane split, fixed final sum), so results are
 * bit-identical for any thread count. The AVX2/FMA path and the portable path use the same lane
 * structure and fused multiply-adds, so they agree bit-for-bit too.
 *
 * For T > 1 the kernels walk each weight row once per chunk of X rows (the weight is the large
 * operand: read it once, reuse it from cache for all T). Pointers need no particular alignment.
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

/* Dot product with the kernels' reduction order (for small ops that must match the kernels). */
float kern_dot_f32(const float *a, const float *b, int n);

/* Which implementation was selected at start-up ("avx2-fma" or "portable"). K3_KERNELS=portable
 * forces the portable path (used by tests to prove the two agree). */
const char *kern_isa(void);

#endif

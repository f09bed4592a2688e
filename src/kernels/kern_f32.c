/* kern_f32.c - fp32 weights (small resident tensors, tests) and kern_dot_f32, the one dot product
 * that other code uses when it must agree bit-for-bit with the matrix kernels. */
#include "kernels/kernels_impl.h"

static void f32_expand(const KernJob *j, int r, int c, int n, float *w) {
    memcpy(w, (const float *)j->W + (size_t)r * (size_t)j->cols + (size_t)c, sizeof(float) * (size_t)n);
}

#if KERN_HAVE_X86
#include "kernels/kern_avx2.h"
#include "kernels/kern_avx512.h"

KERN_AVX2_INLINE void f32_tile_avx2(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const float *W = (const float *)j->W + (size_t)r * cols, *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(4 * cols, nr);
    Acc256 acc[KERN_TILE_MAX];
    acc256_zero(acc, nr * nt);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const float *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc256_fma(acc + i * nt, nt, _mm256_loadu_ps(w), _mm256_loadu_ps(w + 8), X, cols, c);
        }
    }
    acc256_done(j, acc, r, nr, t0, nt);
}

KERN_AVX512_INLINE void f32_tile_avx512(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const float *W = (const float *)j->W + (size_t)r * cols, *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(4 * cols, nr);
    __m512 acc[KERN_TILE_MAX];
    acc512_zero(acc, nr * nt);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const float *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc512_fma(acc + i * nt, nt, _mm512_loadu_ps(w), X, cols, c);
        }
    }
    acc512_done(j, acc, r, nr, t0, nt);
}

KERN_DEFINE_ROWS(KERN_AVX2_FN, f32_rows_avx2, f32_tile_avx2, KERN_OUTS_AVX2)
KERN_DEFINE_ROWS(KERN_AVX512_FN, f32_rows_avx512, f32_tile_avx512, KERN_OUTS_AVX512)
#endif

#if KERN_HAVE_NEON
#include "kernels/kern_neon.h"

KERN_NEON_INLINE Lanes128 f32_decode_neon(const KernJob *j, const uint8_t *at, int row) {
    (void)j, (void)row;
    const float *w = (const float *)(const void *)at;
    return (Lanes128){{vld1q_f32(w), vld1q_f32(w + 4), vld1q_f32(w + 8), vld1q_f32(w + 12)}};
}

KERN_NEON_TILE16(f32_tile_neon, sizeof(float), f32_decode_neon)

KERN_DEFINE_ROWS(KERN_NEON_FN, f32_rows_neon, f32_tile_neon, KERN_OUTS_NEON)
#endif

void kern_matmul_f32_isa(KernIsa isa, Pool *pool, float *Y, const float *W, const float *X, int T, int rows,
                         int cols) {
    KernJob j = {.rows_fn = KERN_ROWS(isa, f32), .expand = f32_expand, .Y = Y, .W = W,
                 .X = X, .T = T, .rows = rows, .cols = cols, .row_bytes = sizeof(float) * (size_t)cols};
    kern_run(pool, &j);
}

void kern_matmul_f32(Pool *pool, float *Y, const float *W, const float *X, int T, int rows, int cols) {
    kern_matmul_f32_isa(kern_selected(), pool, Y, W, X, T, rows, cols);
}

float kern_dot_f32_isa(KernIsa isa, const float *a, const float *b, int n) {
    float y = 0;
    kern_matmul_f32_isa(isa, NULL, &y, a, b, 1, 1, n);
    return y;
}

float kern_dot_f32(const float *a, const float *b, int n) { return kern_dot_f32_isa(kern_selected(), a, b, n); }

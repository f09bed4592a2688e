/* kern_bf16.c - BF16 weights (the resident spine and lm_head), widened exactly to fp32 by a shift. */
#include "format/numfmt.h"
#include "kernels/kernels_impl.h"

static void bf16_expand(const KernJob *j, int r, int c, int n, float *w) {
    const uint16_t *src = (const uint16_t *)j->W + (size_t)r * (size_t)j->cols + (size_t)c;
    for (int i = 0; i < n; i++) w[i] = bf16_to_f32(src[i]);
}

#if KERN_HAVE_X86
#include "kernels/kern_avx2.h"
#include "kernels/kern_avx512.h"

/* 8 BF16 values -> 8 fp32 in column order (zero-extend to 32 bits, shift into the high half). */
KERN_AVX2_INLINE __m256 bf16x8(const uint16_t *w) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

KERN_AVX512_INLINE __m512 bf16x16(const uint16_t *w) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

KERN_AVX2_INLINE void bf16_tile_avx2(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const uint16_t *W = (const uint16_t *)j->W + (size_t)r * cols;
    const float *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(2 * cols, nr);
    Acc256 acc[KERN_TILE_MAX];
    acc256_zero(acc, nr * nt);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint16_t *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc256_fma(acc + i * nt, nt, bf16x8(w), bf16x8(w + 8), X, cols, c);
        }
    }
    acc256_done(j, acc, r, nr, t0, nt);
}

KERN_AVX512_INLINE void bf16_tile_avx512(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const uint16_t *W = (const uint16_t *)j->W + (size_t)r * cols;
    const float *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(2 * cols, nr);
    __m512 acc[KERN_TILE_MAX];
    acc512_zero(acc, nr * nt);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint16_t *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc512_fma(acc + i * nt, nt, bf16x16(w), X, cols, c);
        }
    }
    acc512_done(j, acc, r, nr, t0, nt);
}

KERN_DEFINE_ROWS(KERN_AVX2_FN, bf16_rows_avx2, bf16_tile_avx2, KERN_OUTS_AVX2)
KERN_DEFINE_ROWS(KERN_AVX512_FN, bf16_rows_avx512, bf16_tile_avx512, KERN_OUTS_AVX512)
#endif

#if KERN_HAVE_NEON
#include "kernels/kern_neon.h"

/* 16 BF16 values -> 16 fp32 (each widened into the high half of its word). */
KERN_NEON_INLINE Lanes128 bf16_decode_neon(const KernJob *j, const uint8_t *at, int row) {
    (void)j, (void)row;
    const uint16_t *w = (const uint16_t *)(const void *)at;
    uint16x8_t a = vld1q_u16(w), b = vld1q_u16(w + 8);
    return (Lanes128){{high16_lo(a), high16_hi(a), high16_lo(b), high16_hi(b)}};
}

KERN_NEON_TILE16(bf16_tile_neon, sizeof(uint16_t), bf16_decode_neon)

KERN_DEFINE_ROWS(KERN_NEON_FN, bf16_rows_neon, bf16_tile_neon, KERN_OUTS_NEON)
#endif

void kern_matmul_bf16_isa(KernIsa isa, Pool *pool, float *Y, const uint16_t *W, const float *X, int T, int rows,
                          int cols) {
    KernJob j = {.rows_fn = KERN_ROWS(isa, bf16), .expand = bf16_expand, .Y = Y,
                 .W = W, .X = X, .T = T, .rows = rows, .cols = cols, .row_bytes = sizeof(uint16_t) * (size_t)cols};
    kern_run(pool, &j);
}

void kern_matmul_bf16(Pool *pool, float *Y, const uint16_t *W, const float *X, int T, int rows, int cols) {
    kern_matmul_bf16_isa(kern_selected(), pool, Y, W, X, T, rows, cols);
}

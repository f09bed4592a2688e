/* kern_i8row.c - per-row int8 weights (the converted spine, K3_SPINE=int8): q[r][c] in -127..127
 * and one fp32 scale per row.
 *
 * Each weight is expanded as w = (float)q * scale, one correctly rounded fp32 multiply (the
 * documented dequantisation, convert-spine's file format), and then enters the same 16-lane FMA
 * order as every other format: the result is bit-for-bit the F32 kernel on the dequantised
 * matrix. The scale is not factored out of the row sum, which would round differently. */
#include "kernels/kernels_impl.h"

static void i8row_expand(const KernJob *j, int r, int c, int n, float *w) {
    const int8_t *src = (const int8_t *)j->W + (size_t)r * (size_t)j->cols + (size_t)c;
    float s = ((const float *)j->aux)[r];
    for (int i = 0; i < n; i++) w[i] = (float)src[i] * s;
}

#if KERN_HAVE_X86
#include "kernels/kern_avx2.h"
#include "kernels/kern_avx512.h"

/* 8 int8 -> 8 fp32 times the row scale (sign-extend, exact conversion, one multiply). */
KERN_AVX2_INLINE __m256 i8x8(const int8_t *w, __m256 s) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
}

KERN_AVX512_INLINE __m512 i8x16(const int8_t *w, __m512 s) {
    __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
}

KERN_AVX2_INLINE void i8row_tile_avx2(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const int8_t *W = (const int8_t *)j->W + (size_t)r * cols;
    const float *S = (const float *)j->aux + r;
    const float *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(cols, nr);
    Acc256 acc[KERN_TILE_MAX];
    __m256 s[KERN_TILE_MAX];
    acc256_zero(acc, nr * nt);
    KERN_UNROLL
    for (int i = 0; i < nr; i++) s[i] = _mm256_set1_ps(S[i]);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const int8_t *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc256_fma(acc + i * nt, nt, i8x8(w, s[i]), i8x8(w + 8, s[i]), X, cols, c);
        }
    }
    acc256_done(j, acc, r, nr, t0, nt);
}

KERN_AVX512_INLINE void i8row_tile_avx512(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols;
    const int8_t *W = (const int8_t *)j->W + (size_t)r * cols;
    const float *S = (const float *)j->aux + r;
    const float *X = j->X + (size_t)t0 * cols;
    const size_t ahead = kern_prefetch_ahead(cols, nr);
    __m512 acc[KERN_TILE_MAX], s[KERN_TILE_MAX];
    acc512_zero(acc, nr * nt);
    KERN_UNROLL
    for (int i = 0; i < nr; i++) s[i] = _mm512_set1_ps(S[i]);
    for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const int8_t *w = W + i * cols + c;
            KERN_PREFETCH_AT(w, ahead);
            acc512_fma(acc + i * nt, nt, i8x16(w, s[i]), X, cols, c);
        }
    }
    acc512_done(j, acc, r, nr, t0, nt);
}

KERN_DEFINE_ROWS(KERN_AVX2_FN, i8row_rows_avx2, i8row_tile_avx2, KERN_OUTS_AVX2)
KERN_DEFINE_ROWS(KERN_AVX512_FN, i8row_rows_avx512, i8row_tile_avx512, KERN_OUTS_AVX512)
#endif

#if KERN_HAVE_NEON
#include "kernels/kern_neon.h"

/* 4 int16 -> 4 fp32 times the row scale (exact conversion, one multiply). */
KERN_NEON_INLINE float32x4_t i16x4_scaled(int16x4_t v, float32x4_t s) { return vmulq_f32(vcvtq_f32_s32(vmovl_s16(v)), s); }

/* 16 int8 -> 16 fp32 times the row's scale. */
KERN_NEON_INLINE Lanes128 i8row_decode_neon(const KernJob *j, const uint8_t *at, int row) {
    const int8x16_t q = vld1q_s8((const int8_t *)at);
    const float32x4_t s = vld1q_dup_f32((const float *)j->aux + row);
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    return (Lanes128){{i16x4_scaled(vget_low_s16(lo), s), i16x4_scaled(vget_high_s16(lo), s),
                       i16x4_scaled(vget_low_s16(hi), s), i16x4_scaled(vget_high_s16(hi), s)}};
}

KERN_NEON_TILE16(i8row_tile_neon, sizeof(int8_t), i8row_decode_neon)

KERN_DEFINE_ROWS(KERN_NEON_FN, i8row_rows_neon, i8row_tile_neon, KERN_OUTS_NEON)
#endif

void kern_matmul_i8row_isa(KernIsa isa, Pool *pool, float *Y, const int8_t *W, const float *scales, const float *X,
                           int T, int rows, int cols) {
    KernJob j = {.rows_fn = KERN_ROWS(isa, i8row), .expand = i8row_expand, .Y = Y,
                 .W = W, .aux = scales, .X = X, .T = T, .rows = rows, .cols = cols, .row_bytes = (size_t)cols};
    kern_run(pool, &j);
}

void kern_matmul_i8row(Pool *pool, float *Y, const int8_t *W, const float *scales, const float *X, int T, int rows,
                       int cols) {
    kern_matmul_i8row_isa(kern_selected(), pool, Y, W, scales, X, T, rows, cols);
}

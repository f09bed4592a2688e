/* kern_mxfp4.c - MXFP4 weights (the routed experts): dequantise and multiply in one pass.
 *
 * Each weight is expanded exactly, w = E2M1[code] * 2^(scale-127), and then enters the same
 * 16-lane FMA order as every other format. So the result is bit-for-bit the F32 kernel applied to
 * the dequantised matrix; the scale is NOT factored out of the block sums (that would round
 * differently). The AVX2 path pays for this with one multiply per 32-column block: it scales the
 * 8-entry magnitude table once per block and then each weight is a table lookup plus a sign flip. */
#include "format/numfmt.h"
#include "kernels/kernels_impl.h"

static void mxfp4_expand(const KernJob *j, int r, int c, int n, float *w) {
    const size_t cols = (size_t)j->cols;
    const uint8_t *p = (const uint8_t *)j->W + (size_t)r * (cols / 2) + (size_t)c / 2;
    float scale = kern_e8m0(((const uint8_t *)j->aux)[(size_t)r * (cols / 32) + (size_t)c / 32]);
    for (int i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (uint8_t)(p[i / 2] >> 4) : (uint8_t)(p[i / 2] & 0xF);
        w[i] = mxfp4_e2m1[code] * scale;
    }
}

#if KERN_HAVE_AVX2
#include "kernels/kern_avx2.h"

/* Constants of the decoder, loaded once per micro-tile. */
typedef struct {
    __m256 mag;           /* E2M1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 */
    __m256i shr, shl, sgn; /* nibble k to bits 0..2 / its sign bit to bit 31; the sign mask */
} Mx4Consts;

KERN_AVX2_INLINE Mx4Consts mx4_consts(void) {
    Mx4Consts k;
    k.mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    k.shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    k.shl = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    k.sgn = _mm256_set1_epi32((int)0x80000000u);
    return k;
}

/* 8 columns from 4 packed bytes (little-endian: nibble k is column k). `lut` holds the magnitudes
 * already multiplied by the block scale (exact), so the lookup is the dequantised weight. */
KERN_AVX2_INLINE __m256 mx4_decode8(const uint8_t *p, __m256 lut, const Mx4Consts *k) {
    int32_t bits;
    memcpy(&bits, p, sizeof bits);
    __m256i b = _mm256_set1_epi32(bits);
    __m256 mag = _mm256_permutevar8x32_ps(lut, _mm256_srlv_epi32(b, k->shr)); /* uses bits 0..2 only */
    __m256i sign = _mm256_and_si256(_mm256_sllv_epi32(b, k->shl), k->sgn);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

KERN_AVX2_INLINE void mxfp4_tile(const KernJob *j, int r, int nr, int t0, int nt) {
    const size_t cols = (size_t)j->cols, blocks = cols / 32;
    const uint8_t *P = (const uint8_t *)j->W + (size_t)r * (cols / 2);
    const uint8_t *S = (const uint8_t *)j->aux + (size_t)r * blocks;
    const float *X = j->X + (size_t)t0 * cols;
    const Mx4Consts k = mx4_consts();
    Acc acc[KERN_TILE_MAX];
    acc_zero(acc, nr * nt);
    for (size_t b = 0; b < blocks; b++)
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = P + i * (cols / 2) + 16 * b;
            __m256 lut = _mm256_mul_ps(k.mag, _mm256_set1_ps(kern_e8m0(S[i * blocks + b])));
            __m256 w0 = mx4_decode8(p, lut, &k), w1 = mx4_decode8(p + 4, lut, &k);
            acc_fma(acc + i * nt, nt, w0, w1, X, cols, 32 * b);
            __m256 w2 = mx4_decode8(p + 8, lut, &k), w3 = mx4_decode8(p + 12, lut, &k);
            acc_fma(acc + i * nt, nt, w2, w3, X, cols, 32 * b + 16);
        }
    acc_done(j, acc, r, nr, t0, nt);
}

KERN_AVX2_ROWS(mxfp4_rows_avx2, mxfp4_tile)
#endif

void kern_matmul_mxfp4_isa(KernIsa isa, Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales,
                           const float *X, int T, int rows, int cols) {
    KernJob j = {.rows_fn = KERN_ROWS(isa, mxfp4_rows_avx2), .expand = mxfp4_expand, .Y = Y, .W = packed,
                 .aux = scales, .X = X, .T = T, .rows = rows, .cols = cols,
                 .row_bytes = (size_t)cols / 2 + (size_t)cols / 32};
    kern_run(pool, &j);
}

void kern_matmul_mxfp4(Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales, const float *X, int T,
                       int rows, int cols) {
    kern_matmul_mxfp4_isa(kern_selected(), pool, Y, packed, scales, X, T, rows, cols);
}

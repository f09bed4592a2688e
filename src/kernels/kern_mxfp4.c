/* kern_mxfp4.c - MXFP4 weights (the routed experts): dequantise and multiply in one pass.
 *
 * Each weight is expanded exactly, w = E2M1[code] * 2^(scale-127), and then enters the same
 * 16-lane FMA order as every other format, so the result is bit-for-bit the F32 kernel applied to
 * the dequantised matrix. The scale is deliberately NOT factored out of the 32-column block sums
 * (that would round differently from dequantise-then-multiply). The SIMD paths pay for this with
 * one multiply per block: they scale the E2M1 table once per block, after which every weight is a
 * table lookup (exact: the table entries are the dequantised values). */
#include <assert.h>

#include "format/numfmt.h"
#include "kernels/kernels_impl.h"

/* The float with exponent field s is 2^(s-127) for s = 1..254; 0 and 255 are the OCP special cases. */
#define E8M0(s) ((s) == 0 ? 0x00400000u : (s) == 255 ? 0x7fc00000u : (uint32_t)(s) << 23)
#define E8M0_4(s) E8M0(s), E8M0((s) + 1), E8M0((s) + 2), E8M0((s) + 3)
#define E8M0_16(s) E8M0_4(s), E8M0_4((s) + 4), E8M0_4((s) + 8), E8M0_4((s) + 12)
#define E8M0_64(s) E8M0_16(s), E8M0_16((s) + 16), E8M0_16((s) + 32), E8M0_16((s) + 48)
const KernE8m0Table kern_e8m0_table = {{E8M0_64(0), E8M0_64(64), E8M0_64(128), E8M0_64(192)}};

static void mxfp4_expand(const KernJob *j, int r, int c, int n, float *w) {
    const size_t cols = (size_t)j->cols;
    const uint8_t *p = (const uint8_t *)j->W + (size_t)r * (cols / 2) + (size_t)c / 2;
    float scale = kern_e8m0_table.f[((const uint8_t *)j->aux)[(size_t)r * (cols / 32) + (size_t)c / 32]];
    for (int i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (uint8_t)(p[i / 2] >> 4) : (uint8_t)(p[i / 2] & 0xF);
        w[i] = mxfp4_e2m1[code] * scale;
    }
}

/* Where a micro-tile's rows start: packed nibbles, scale bytes, X. */
#define MX4_TILE_SETUP                                                              \
    const size_t cols = (size_t)j->cols, blocks = cols / 32;                        \
    const uint8_t *P = (const uint8_t *)j->W + (size_t)r * (cols / 2);              \
    const uint8_t *S = (const uint8_t *)j->aux + (size_t)r * blocks;                \
    const float *X = j->X + (size_t)t0 * cols

#if KERN_HAVE_X86
#include "kernels/kern_avx2.h"
#include "kernels/kern_avx512.h"

/* AVX2 has only an 8-entry permute: look up the magnitude (code bits 0..2) in the scaled table of
 * magnitudes and move the sign (bit 3) to bit 31 with a shift. Packed bytes are little-endian, so
 * in a 32-bit word of 4 bytes, nibble k is column k. */
typedef struct {
    __m256 mag;            /* E2M1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 */
    __m256i shr, shl, sgn; /* nibble k to bits 0..3 / its sign bit to bit 31; the sign mask */
} Mx4Avx2;

KERN_AVX2_INLINE Mx4Avx2 mx4_avx2_consts(void) {
    Mx4Avx2 k;
    k.mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    k.shr = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    k.shl = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    k.sgn = _mm256_set1_epi32((int)0x80000000u);
    return k;
}

/* 8 columns from 4 packed bytes; `mag` = the magnitudes times the block scale. */
KERN_AVX2_INLINE __m256 mx4_decode8(const uint8_t *p, __m256 mag, const Mx4Avx2 *k) {
    int32_t bits;
    memcpy(&bits, p, sizeof bits);
    __m256i b = _mm256_set1_epi32(bits);
    __m256 m = _mm256_permutevar8x32_ps(mag, _mm256_srlv_epi32(b, k->shr)); /* reads bits 0..2 only */
    __m256i sign = _mm256_and_si256(_mm256_sllv_epi32(b, k->shl), k->sgn);
    return _mm256_xor_ps(m, _mm256_castsi256_ps(sign));
}

KERN_AVX2_INLINE void mxfp4_tile_avx2(const KernJob *j, int r, int nr, int t0, int nt) {
    MX4_TILE_SETUP;
    const Mx4Avx2 k = mx4_avx2_consts();
    const size_t ahead = kern_prefetch_ahead(cols / 2, nr);
    Acc256 acc[KERN_TILE_MAX];
    acc256_zero(acc, nr * nt);
    for (size_t b = 0; b < blocks; b++) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = P + i * (cols / 2) + 16 * b;
            KERN_PREFETCH_AT(p, ahead);
            __m256 mag = _mm256_mul_ps(k.mag, _mm256_broadcast_ss(&kern_e8m0_table.f[S[i * blocks + b]]));
            acc256_fma(acc + i * nt, nt, mx4_decode8(p, mag, &k), mx4_decode8(p + 4, mag, &k), X, cols, 32 * b);
            acc256_fma(acc + i * nt, nt, mx4_decode8(p + 8, mag, &k), mx4_decode8(p + 12, mag, &k), X, cols,
                       32 * b + 16);
        }
    }
    acc256_done(j, acc, r, nr, t0, nt);
}

/* AVX-512 permutes 16 entries: the signed table (times the block scale) is one register and a
 * column is a shift plus a lookup. Lanes 0..7 take the nibbles of the first 4 bytes, lanes 8..15
 * those of the next 4: two broadcast loads (the second masked to the upper lanes) put them there
 * without a shuffle, which leaves the shuffle unit to the table lookup. */
typedef struct {
    __m512 e2m1;
    __m512i shr;
} Mx4Avx512;

KERN_AVX512_INLINE Mx4Avx512 mx4_avx512_consts(void) {
    Mx4Avx512 k;
    k.e2m1 = _mm512_loadu_ps(mxfp4_e2m1);
    k.shr = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    return k;
}

/* 16 columns from 8 packed bytes; `table` = E2M1 times the block scale. */
KERN_AVX512_INLINE __m512 mx4_decode16(const uint8_t *p, __m512 table, const Mx4Avx512 *k) {
    int32_t lo, hi;
    memcpy(&lo, p, sizeof lo);
    memcpy(&hi, p + 4, sizeof hi);
    __m512i b = _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi);
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(b, k->shr), table); /* reads bits 0..3 only */
}

KERN_AVX512_INLINE void mxfp4_tile_avx512(const KernJob *j, int r, int nr, int t0, int nt) {
    MX4_TILE_SETUP;
    const Mx4Avx512 k = mx4_avx512_consts();
    const size_t ahead = kern_prefetch_ahead(cols / 2, nr);
    __m512 acc[KERN_TILE_MAX];
    acc512_zero(acc, nr * nt);
    for (size_t b = 0; b < blocks; b++) {
        KERN_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = P + i * (cols / 2) + 16 * b;
            KERN_PREFETCH_AT(p, ahead);
            __m512 table = _mm512_mul_ps(k.e2m1, _mm512_set1_ps(kern_e8m0_table.f[S[i * blocks + b]]));
            acc512_fma(acc + i * nt, nt, mx4_decode16(p, table, &k), X, cols, 32 * b);
            acc512_fma(acc + i * nt, nt, mx4_decode16(p + 8, table, &k), X, cols, 32 * b + 16);
        }
    }
    acc512_done(j, acc, r, nr, t0, nt);
}

KERN_DEFINE_ROWS(KERN_AVX2_FN, mxfp4_rows_avx2, mxfp4_tile_avx2, KERN_OUTS_AVX2)
KERN_DEFINE_ROWS(KERN_AVX512_FN, mxfp4_rows_avx512, mxfp4_tile_avx512, KERN_OUTS_AVX512)
#endif

#if KERN_HAVE_NEON
#include "kernels/kern_neon.h"

/* NEON looks bytes up in 16-entry tables (TBL). Every E2M1 value is an fp32 whose low 16 bits are
 * zero (at most two significant bits), so a code's value is two bytes: the table's bytes 2 and 3,
 * one 16-entry table each. Nibbles become codes in column order (byte k holds columns 2k and
 * 2k+1, low nibble first), two lookups give the two bytes of 16 codes, interleaving them gives the
 * 16-bit high halves, and widening gives the fp32 values; times the block scale, exactly as
 * mxfp4_expand. */
typedef struct {
    uint8x16_t byte2, byte3; /* bytes 2 and 3 of mxfp4_e2m1[code] */
    uint8x16_t nibble;       /* 0x0F */
} Mx4Neon;

KERN_NEON_INLINE Mx4Neon mx4_neon_consts(void) {
    Mx4Neon k;
    uint16x8_t h0 = vuzp2q_u16(vreinterpretq_u16_f32(vld1q_f32(mxfp4_e2m1)), vreinterpretq_u16_f32(vld1q_f32(mxfp4_e2m1 + 4)));
    uint16x8_t h1 = vuzp2q_u16(vreinterpretq_u16_f32(vld1q_f32(mxfp4_e2m1 + 8)), vreinterpretq_u16_f32(vld1q_f32(mxfp4_e2m1 + 12)));
    k.byte2 = vuzp1q_u8(vreinterpretq_u8_u16(h0), vreinterpretq_u8_u16(h1));
    k.byte3 = vuzp2q_u8(vreinterpretq_u8_u16(h0), vreinterpretq_u8_u16(h1));
    k.nibble = vdupq_n_u8(0x0F);
    return k;
}

/* 16 columns from their 16 codes (one per byte, column order) times the block scale. */
KERN_NEON_INLINE Lanes128 mx4_decode16(uint8x16_t codes, float32x4_t scale, const Mx4Neon *k) {
    uint8x16_t b2 = vqtbl1q_u8(k->byte2, codes), b3 = vqtbl1q_u8(k->byte3, codes);
    uint16x8_t h0 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3)), h1 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
    Lanes128 w = {{vmulq_f32(high16_lo(h0), scale), vmulq_f32(high16_hi(h0), scale), vmulq_f32(high16_lo(h1), scale),
                   vmulq_f32(high16_hi(h1), scale)}};
    return w;
}

KERN_NEON_INLINE void mxfp4_tile_neon(const KernJob *j, int r, int nr, int t0, int nt) {
    MX4_TILE_SETUP;
    const Mx4Neon k = mx4_neon_consts();
    const size_t ahead = kern_prefetch_ahead(cols / 2, nr);
    Lanes128 acc[KERN_TILE_MAX];
    acc128_zero(acc, nr * nt);
    for (size_t b = 0; b < blocks; b++) {
        KERN_NEON_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = P + i * (cols / 2) + 16 * b;
            KERN_PREFETCH_AT(p, ahead);
            const float32x4_t scale = vld1q_dup_f32(&kern_e8m0_table.f[S[i * blocks + b]]);
            uint8x16_t packed = vld1q_u8(p), lo = vandq_u8(packed, k.nibble), hi = vshrq_n_u8(packed, 4);
            Lanes128 w0 = mx4_decode16(vzip1q_u8(lo, hi), scale, &k), w1 = mx4_decode16(vzip2q_u8(lo, hi), scale, &k);
            acc128_fma(acc + i * nt, nt, &w0, X, cols, 32 * b);
            acc128_fma(acc + i * nt, nt, &w1, X, cols, 32 * b + 16);
        }
    }
    acc128_done(j, acc, r, nr, t0, nt);
}

/* Two outputs per tile, not KERN_OUTS_NEON's four: decoding, not the FMA latency, bounds this
 * kernel, and four rows' decoded weights overflow the 32 registers (GCC 12 and clang 16 both
 * spilled a third of their loads; two rows decode 13-23% more bytes per instruction, none spilled:
 * docs/PERFORMANCE.md, "NEON"). */
#define KERN_OUTS_NEON_MXFP4 2
KERN_DEFINE_ROWS(KERN_NEON_FN, mxfp4_rows_neon, mxfp4_tile_neon, KERN_OUTS_NEON_MXFP4)
#endif

void kern_matmul_mxfp4_isa(KernIsa isa, Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales,
                           const float *X, int T, int rows, int cols) {
    assert(cols % 32 == 0); /* whole scale blocks: config.c requires expert widths divisible by 32 */
    KernJob j = {.rows_fn = KERN_ROWS(isa, mxfp4), .expand = mxfp4_expand, .Y = Y,
                 .W = packed, .aux = scales, .X = X, .T = T, .rows = rows, .cols = cols,
                 .row_bytes = (size_t)cols / 2 + (size_t)cols / 32};
    kern_run(pool, &j);
}

void kern_matmul_mxfp4(Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales, const float *X, int T,
                       int rows, int cols) {
    kern_matmul_mxfp4_isa(kern_selected(), pool, Y, packed, scales, X, T, rows, cols);
}

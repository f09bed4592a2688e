/* kern_neon.h - the NEON (AArch64 Advanced SIMD) form of the lane structure (kernels_impl.h): the
 * 16 lanes of one output in four 128-bit registers (lanes 4k..4k+3 in register k), the fused
 * multiply-add (FMLA, one rounding, as vfmadd and fmaf) over a tile of X rows, and the hand-off to
 * kern_finish. Same contract as kern_avx2.h; each format supplies only the decoding of its
 * weights. Included by the kernel files inside #if KERN_HAVE_NEON. NEON is part of every AArch64
 * CPU, so no target attribute is needed; the fused multiply-adds are written as intrinsics, which
 * -ffp-contract=off leaves fused. */
#ifndef DF_KERN_NEON_H
#define DF_KERN_NEON_H

#include <arm_neon.h>

#include "kernels/kernels_impl.h"

#define KERN_NEON_FN
#define KERN_NEON_INLINE __attribute__((always_inline)) static inline
/* KERN_UNROLL for the NEON tiles. clang (the macOS compiler) takes GCC's pragma as a partial
 * unroll and left every accumulator in memory (a load and a store around each FMLA); its own full
 * unroll keeps them in registers. (Not in KERN_UNROLL: on the x86 tiles under the fuzzers'
 * sanitizers it made clang take minutes per file.) */
#if defined(__clang__)
#define KERN_NEON_UNROLL _Pragma("clang loop unroll(full)")
#else
#define KERN_NEON_UNROLL KERN_UNROLL
#endif

/* Outputs per micro-tile (kernels_impl.h): each holds four FMA chains, so a tile keeps 16 chains
 * in flight (four FMA pipes of four cycles' latency on current cores) in 16 of the 32 vector
 * registers, which leaves the rest for the weights, X and the decoding constants. */
#define KERN_OUTS_NEON 4

/* The 16 lanes of one output, or 16 weights. */
typedef struct {
    float32x4_t v[4];
} Lanes128;

KERN_NEON_INLINE void acc128_zero(Lanes128 *a, int n) {
    KERN_NEON_UNROLL
    for (int i = 0; i < n; i++) a[i].v[0] = a[i].v[1] = a[i].v[2] = a[i].v[3] = vdupq_n_f32(0.0f);
}

/* a[t] += w * x_t[c .. c+16) for nt X rows of stride ldx. */
KERN_NEON_INLINE void acc128_fma(Lanes128 *a, int nt, const Lanes128 *w, const float *X, size_t ldx, size_t c) {
    KERN_NEON_UNROLL
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * ldx + c;
        KERN_NEON_UNROLL
        for (int k = 0; k < 4; k++) a[t].v[k] = vfmaq_f32(a[t].v[k], w->v[k], vld1q_f32(x + 4 * k));
    }
}

/* Hands the lanes of an [nr][nt] tile to kern_finish (tail columns, lane sum, store). */
KERN_NEON_INLINE void acc128_done(const KernJob *j, const Lanes128 *a, int r, int nr, int t0, int nt) {
    Lanes lanes[KERN_TILE_MAX];
    KERN_NEON_UNROLL
    for (int i = 0; i < nr * nt; i++)
        for (int k = 0; k < 4; k++) vst1q_f32(lanes[i].l + 4 * k, a[i].v[k]);
    kern_finish(j, lanes, r, nr, t0, nt);
}

/* Defines the micro-tile `name(j, r, nr, t0, nt)` of a format decoded 16 columns at a time: the nr
 * weight rows side by side, `decode(j, at, row)` (an always_inline function returning as Lanes128
 * the exact fp32 values of the 16 weights stored from byte `at` of row `row`) for each, multiplied
 * into the nt X rows. col_bytes: weight bytes per column. */
#define KERN_NEON_TILE16(name, col_bytes, decode)                                      \
    KERN_NEON_INLINE void name(const KernJob *j, int r, int nr, int t0, int nt) {      \
        const size_t cols = (size_t)j->cols, row_bytes = (col_bytes) * cols;           \
        const uint8_t *W = (const uint8_t *)j->W + (size_t)r * row_bytes;              \
        const float *X = j->X + (size_t)t0 * cols;                                     \
        const size_t ahead = kern_prefetch_ahead(row_bytes, nr);                       \
        Lanes128 acc[KERN_TILE_MAX];                                                   \
        acc128_zero(acc, nr * nt);                                                     \
        for (size_t c = 0; c + KERN_LANES <= cols; c += KERN_LANES) {                  \
            KERN_NEON_UNROLL                                                           \
            for (int i = 0; i < nr; i++) {                                             \
                const uint8_t *at = W + (size_t)i * row_bytes + c * (col_bytes);       \
                KERN_PREFETCH_AT(at, ahead);                                           \
                const Lanes128 w = decode(j, at, r + i);                               \
                acc128_fma(acc + i * nt, nt, &w, X, cols, c);                          \
            }                                                                          \
        }                                                                              \
        acc128_done(j, acc, r, nr, t0, nt);                                            \
    }

/* Widens 16-bit values to the high halves of fp32 words: 8 values -> lanes 0..3 and 4..7. The
 * exact widening of BF16, and of any fp32 whose low 16 bits are zero. */
KERN_NEON_INLINE float32x4_t high16_lo(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)); }
KERN_NEON_INLINE float32x4_t high16_hi(uint16x8_t h) { return vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)); }

#endif

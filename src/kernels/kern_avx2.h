/* kern_avx2.h - the AVX2+FMA half of the lane structure (kernels_impl.h): 16 lanes in two ymm
 * registers, the fused multiply-add over a tile of X rows, and the row loop that picks a micro-tile
 * shape. Each format supplies only the decoding of its weights. Included by the kernel files inside
 * #if KERN_HAVE_AVX2; every function is compiled for AVX2+FMA whatever the build's -march. */
#ifndef DF_KERN_AVX2_H
#define DF_KERN_AVX2_H

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define KERN_AVX2_FN __attribute__((target("avx2,fma")))
#define KERN_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* Lanes 0..7 and 8..15 of one output. */
typedef struct {
    __m256 lo, hi;
} Acc;

/* Micro-tiles hold at most this many outputs (nr weight rows x nt X rows): 8 accumulator registers
 * leave 8 for weights, decoding constants and temporaries. */
#define KERN_TILE_MAX 4

/* Loops over the tile are unrolled so the accumulators live in registers. */
#define KERN_UNROLL _Pragma("GCC unroll 4")

KERN_AVX2_INLINE void acc_zero(Acc *a, int n) {
    KERN_UNROLL
    for (int i = 0; i < n; i++) a[i].lo = a[i].hi = _mm256_setzero_ps();
}

/* a[t] += (w0, w1) * x_t[c .. c+16) for nt X rows of stride ldx. */
KERN_AVX2_INLINE void acc_fma(Acc *a, int nt, __m256 w0, __m256 w1, const float *X, size_t ldx, size_t c) {
    KERN_UNROLL
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * ldx + c;
        a[t].lo = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a[t].lo);
        a[t].hi = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a[t].hi);
    }
}

/* Hands the lanes of an [nr][nt] tile to kern_finish (tail columns, lane sum, store). */
KERN_AVX2_INLINE void acc_done(const KernJob *j, const Acc *a, int r, int nr, int t0, int nt) {
    Lanes lanes[KERN_TILE_MAX];
    KERN_UNROLL
    for (int i = 0; i < nr * nt; i++) {
        _mm256_storeu_ps(lanes[i].l, a[i].lo);
        _mm256_storeu_ps(lanes[i].l + 8, a[i].hi);
    }
    kern_finish(j, lanes, r, nr, t0, nt);
}

/* Defines `static void name(const KernJob *, int r0, int r1, int t0, int nt)` from a format's
 * micro-tile `tile(j, r, nr, t0, nt)`, calling it with constant shapes so the compiler keeps the
 * accumulators in registers: two weight rows at a time for one X row (more independent FMA chains
 * in decode), one weight row against the whole X tile otherwise. */
#define KERN_AVX2_ROWS(name, tile)                                             \
    KERN_AVX2_FN static void name(const KernJob *j, int r0, int r1, int t0, int nt) { \
        int r = r0;                                                            \
        if (nt == 1)                                                           \
            for (; r + 2 <= r1; r += 2) tile(j, r, 2, t0, 1);                  \
        for (; r < r1; r++) {                                                  \
            switch (nt) {                                                      \
            case 1: tile(j, r, 1, t0, 1); break;                               \
            case 2: tile(j, r, 1, t0, 2); break;                               \
            case 3: tile(j, r, 1, t0, 3); break;                               \
            default: tile(j, r, 1, t0, 4); break;                              \
            }                                                                  \
        }                                                                      \
    }

#endif

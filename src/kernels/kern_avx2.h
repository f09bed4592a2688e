/* kern_avx2.h - the AVX2+FMA form of the lane structure (kernels_impl.h): the 16 lanes of one
 * output in two ymm registers, the fused multiply-add over a tile of X rows, and the hand-off to
 * kern_finish. Each format supplies only the decoding of its weights. Included by the kernel files
 * inside #if KERN_HAVE_X86; every function is compiled for AVX2+FMA whatever the build's -march. */
#ifndef DF_KERN_AVX2_H
#define DF_KERN_AVX2_H

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define KERN_AVX2_FN __attribute__((target("avx2,fma")))
#define KERN_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* Outputs per micro-tile (kernels_impl.h): each holds two FMA chains, and 16 ymm registers must
 * also hold the weights, decoding constants and temporaries. */
#define KERN_OUTS_AVX2 2

/* Lanes 0..7 and 8..15 of one output. */
typedef struct {
    __m256 lo, hi;
} Acc256;

KERN_AVX2_INLINE void acc256_zero(Acc256 *a, int n) {
    KERN_UNROLL
    for (int i = 0; i < n; i++) a[i].lo = a[i].hi = _mm256_setzero_ps();
}

/* a[t] += (w0, w1) * x_t[c .. c+16) for nt X rows of stride ldx. */
KERN_AVX2_INLINE void acc256_fma(Acc256 *a, int nt, __m256 w0, __m256 w1, const float *X, size_t ldx, size_t c) {
    KERN_UNROLL
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * ldx + c;
        a[t].lo = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a[t].lo);
        a[t].hi = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a[t].hi);
    }
}

/* Hands the lanes of an [nr][nt] tile to kern_finish (tail columns, lane sum, store). */
KERN_AVX2_INLINE void acc256_done(const KernJob *j, const Acc256 *a, int r, int nr, int t0, int nt) {
    Lanes lanes[KERN_TILE_MAX];
    KERN_UNROLL
    for (int i = 0; i < nr * nt; i++) {
        _mm256_storeu_ps(lanes[i].l, a[i].lo);
        _mm256_storeu_ps(lanes[i].l + 8, a[i].hi);
    }
    kern_finish(j, lanes, r, nr, t0, nt);
}

#endif

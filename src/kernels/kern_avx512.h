/* kern_avx512.h - the AVX-512 form of the lane structure (kernels_impl.h): the 16 lanes of one
 * output are exactly one zmm register. Same contract as kern_avx2.h; needs only AVX-512F. */
#ifndef DF_KERN_AVX512_H
#define DF_KERN_AVX512_H

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define KERN_AVX512_FN __attribute__((target("avx512f,avx2,fma")))
#define KERN_AVX512_INLINE __attribute__((target("avx512f,avx2,fma"), always_inline)) static inline

/* Outputs per micro-tile (kernels_impl.h): one FMA chain each. Eight chains cover the FMA latency
 * in decode (eight weight rows per pass) and share each X load between two weight rows when
 * batched; 32 zmm registers leave plenty for the rest. */
#define KERN_OUTS_AVX512 8

KERN_AVX512_INLINE void acc512_zero(__m512 *a, int n) {
    KERN_UNROLL
    for (int i = 0; i < n; i++) a[i] = _mm512_setzero_ps();
}

/* a[t] += w * x_t[c .. c+16) for nt X rows of stride ldx. */
KERN_AVX512_INLINE void acc512_fma(__m512 *a, int nt, __m512 w, const float *X, size_t ldx, size_t c) {
    KERN_UNROLL
    for (int t = 0; t < nt; t++) a[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(X + (size_t)t * ldx + c), a[t]);
}

KERN_AVX512_INLINE void acc512_done(const KernJob *j, const __m512 *a, int r, int nr, int t0, int nt) {
    Lanes lanes[KERN_TILE_MAX];
    KERN_UNROLL
    for (int i = 0; i < nr * nt; i++) _mm512_storeu_ps(lanes[i].l, a[i]);
    kern_finish(j, lanes, r, nr, t0, nt);
}

#endif

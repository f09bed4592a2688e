/* kernels_impl.h - what the kernel files share, and the hooks tests use to pin an implementation.
 * Internal to src/kernels (and tests/unit/test_kernels.c, bench/bench_kernels.c).
 *
 * THE REDUCTION ORDER (every kernel, every ISA, every thread count, every T):
 *   One output y = sum_c w[c] * x[c] over n columns is reduced in 16 fp32 lanes. The row is
 *   zero-padded to a multiple of 16; lane l accumulates columns l, l+16, l+32, ... in increasing
 *   order with one fused multiply-add each, starting from +0. The lanes are then summed by a fixed
 *   tree: s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], y = s2[0] + s2[1].
 *   The weight w[c] is the exact fp32 expansion of the stored value (BF16 by a shift; MXFP4 as
 *   E2M1[code] * 2^(scale-127), an exact product), so each format computes bit-for-bit what the F32
 *   kernel computes on the dequantised matrix.
 * The AVX2 path holds the 16 lanes in two ymm registers; the portable path holds them in a float[16]
 * and uses fmaf(). Tiling (several weight rows or X rows per pass) and threading (row chunks) only
 * decide which outputs are computed together, never how one output is reduced. */
#ifndef DF_KERNELS_IMPL_H
#define DF_KERNELS_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

#define KERN_LANES 16
#define KERN_TT 4 /* X rows per weight-row pass */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KERN_HAVE_AVX2 1
#else
#define KERN_HAVE_AVX2 0
#endif

typedef enum { KERN_PORTABLE, KERN_AVX2 } KernIsa;

/* The implementation chosen once per process (K3_KERNELS, CPU features). */
KernIsa kern_selected(void);
/* Whether this CPU (and OS) can run the AVX2+FMA path. */
int kern_avx2_available(void);

/* ---- portable lane helpers (the definition of the order; the AVX2 path mirrors them) ---- */

typedef struct {
    float l[KERN_LANES];
} Lanes;

/* acc[t].l[i] = fma(w[i], x_t[c + i], acc[t].l[i]) for nt X rows (row stride ldx), i < 16. */
static inline void lanes_fma(Lanes *acc, int nt, const float *w, const float *X, size_t ldx, size_t c) {
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < KERN_LANES; i++) acc[t].l[i] = fmaf(w[i], X[t * ldx + c + i], acc[t].l[i]);
}

/* The last n < 16 columns: weights w[0..n) (expanded), the rest of the 16 lanes padded with zeros. */
static inline void lanes_fma_tail(Lanes *acc, int nt, const float *w, const float *X, size_t ldx, size_t c, int n) {
    float wp[KERN_LANES] = {0};
    memcpy(wp, w, sizeof(float) * (size_t)n);
    for (int t = 0; t < nt; t++) {
        float xp[KERN_LANES] = {0};
        memcpy(xp, X + t * ldx + c, sizeof(float) * (size_t)n);
        lanes_fma(acc + t, 1, wp, xp, 0, 0);
    }
}

static inline float lanes_sum(const Lanes *a) {
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; i++) s8[i] = a->l[i] + a->l[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}

/* One matrix product, as the tiling driver sees it. */
typedef struct KernJob KernJob;
/* Computes Y[t][r] for rows r0 <= r < r1 and X rows t0 <= t < t0 + nt (nt <= KERN_TT). */
typedef void (*KernRowsFn)(const KernJob *j, int r0, int r1, int t0, int nt);
/* Expands weights [c, c + n) of row r to fp32 (n <= 16; c a multiple of 16). */
typedef void (*KernExpandFn)(const KernJob *j, int r, int c, int n, float *w);
struct KernJob {
    KernRowsFn rows_fn;
    KernExpandFn expand;
    float *Y;        /* [T][rows] */
    const void *W;   /* format-specific, row-major */
    const void *aux; /* MXFP4 scales, else NULL */
    const float *X;  /* [T][cols] */
    int T, rows, cols;
    size_t row_bytes; /* weight bytes per row: sizes the row chunks */
};

/* Runs a job: splits the rows into chunks (over the pool when the work pays for it) and walks the
 * X rows in tiles of KERN_TT inside each chunk, so a chunk of weights is read from memory once and
 * from cache for the other tiles. kern_tile.c. */
void kern_run(Pool *pool, const KernJob *j);

/* The portable rows function of every format: j->expand 16 columns at a time, lanes_fma. */
void kern_rows_portable(const KernJob *j, int r0, int r1, int t0, int nt);

/* Completes outputs whose full 16-column groups are in acc ([nr][nt], rows r.., X rows t0..):
 * adds the tail columns (cols % 16, expanded by j->expand), sums the lanes, stores into Y. */
void kern_finish(const KernJob *j, Lanes *acc, int r, int nr, int t0, int nt);

#if KERN_HAVE_AVX2
#define KERN_ROWS(isa, avx2_fn) ((isa) == KERN_AVX2 ? (avx2_fn) : kern_rows_portable)
#else
#define KERN_ROWS(isa, avx2_fn) kern_rows_portable
#endif

/* The public kernels with the implementation pinned (an ISA the CPU lacks is a caller error). */
void kern_matmul_bf16_isa(KernIsa isa, Pool *pool, float *Y, const uint16_t *W, const float *X, int T, int rows,
                          int cols);
void kern_matmul_f32_isa(KernIsa isa, Pool *pool, float *Y, const float *W, const float *X, int T, int rows,
                         int cols);
void kern_matmul_mxfp4_isa(KernIsa isa, Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales,
                           const float *X, int T, int rows, int cols);
float kern_dot_f32_isa(KernIsa isa, const float *a, const float *b, int n);

/* E8M0 scale byte -> 2^(s-127) as float bits: 0 -> 2^-127 (subnormal), 255 -> NaN. */
static inline float kern_e8m0(uint8_t s) {
    uint32_t bits = s == 0 ? 0x00400000u : s == 255 ? 0x7fc00000u : (uint32_t)s << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif

/* kernels_impl.h - what the kernel files share, and the hooks tests use to pin an implementation.
 * Internal to src/kernels (and tests/unit/test_kernels.c, bench/bench_kernels.c).
 *
 * THE REDUCTION ORDER (every kernel, every ISA, every thread count, every T):
 *   One output y = sum_c w[c] * x[c] over n columns is reduced in 16 fp32 lanes. The row is
 *   zero-padded to a multiple of 16; lane l accumulates columns l, l+16, l+32, ... in increasing
 *   order with one fused multiply-add each, starting from +0. The lanes are then summed by a fixed
 *   tree: s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], y = s2[0] + s2[1].
 *   The weight w[c] is the exact fp32 expansion of the stored value (BF16 by a shift; MXFP4 as
 *   E2M1[code] * 2^(scale-127), an exact product; I8ROW as one fp32 multiply q * row_scale), so each format computes bit-for-bit what the F32
 *   kernel computes on the dequantised matrix.
 * The AVX-512 path holds the 16 lanes in one zmm register, the AVX2 path in two ymm registers, the
 * NEON path (AArch64) in four 128-bit registers, the portable path in a float[16] with fmaf();
 * fused multiply-add is correctly rounded everywhere, so the four agree bit for bit, and an x86
 * build and an ARM build compute the same bits. Tiling (several weight rows or X rows per pass) and threading (row
 * chunks) only decide which outputs are computed together, never how one output is reduced. */
#ifndef DF_KERNELS_IMPL_H
#define DF_KERNELS_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

#define KERN_LANES 16
/* Below this many multiply-adds a pool wake-up costs more than a second thread saves. */
#define KERN_PARALLEL_MIN_MACS (1u << 18)
#define KERN_TT 4 /* X rows per weight-row pass */

/* Whether the x86 SIMD paths are compiled in (they are selected at run time, never by -march). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KERN_HAVE_X86 1
#else
#define KERN_HAVE_X86 0
#endif
/* Whether the NEON path is compiled in: every AArch64 CPU has NEON (Advanced SIMD is part of the
 * architecture), so on AArch64 it is always there to select. */
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define KERN_HAVE_NEON 1
#else
#define KERN_HAVE_NEON 0
#endif

typedef enum { KERN_PORTABLE, KERN_AVX2, KERN_AVX512, KERN_NEON, KERN_N_ISA } KernIsa;

/* The implementation chosen once per process (K3_KERNELS, CPU features). */
KernIsa kern_selected(void);
/* Whether this binary has an implementation (the portable one and its architecture's SIMD ones). */
int kern_isa_built(KernIsa isa);
/* Whether this CPU (and OS) can run an implementation (it is built, and the CPU has the features). */
int kern_isa_available(KernIsa isa);
/* Its name as kern_isa() prints it. */
const char *kern_isa_name(KernIsa isa);

/* ---- portable lane helpers (the definition of the order; the SIMD paths mirror them) ---- */

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

/* The rows function of an ISA for format `fmt`, from the format's SIMD rows functions
 * fmt_rows_avx2, fmt_rows_avx512 (x86) or fmt_rows_neon (AArch64). */
#if KERN_HAVE_X86
#define KERN_ROWS(isa, fmt) \
    ((isa) == KERN_AVX512 ? fmt##_rows_avx512 : (isa) == KERN_AVX2 ? fmt##_rows_avx2 : kern_rows_portable)
#elif KERN_HAVE_NEON
#define KERN_ROWS(isa, fmt) ((isa) == KERN_NEON ? fmt##_rows_neon : kern_rows_portable)
#else
#define KERN_ROWS(isa, fmt) ((void)(isa), kern_rows_portable)
#endif

/* Defines `static void name(const KernJob *, int r0, int r1, int t0, int nt)` from a SIMD
 * micro-tile `tile(j, r, nr, t0, nt)` (nr weight rows x nt X rows). A lane's FMAs form one
 * dependency chain, so a tile computes `outs` outputs at once (nr = outs / nt rows; more rows per
 * pass for fewer X rows) to keep enough chains in flight; rows left over go in halving tiles. The
 * shapes are compile-time constants so the compiler keeps the accumulators in registers. `attr` is
 * the function's target attribute. */
#define KERN_TILE_MAX 8 /* also the row multiple kern_run gives each chunk */
#define KERN_ROWS_NT(tile, outs, NT)                                           \
    do {                                                                       \
        enum { NR = (outs) / (NT) > 1 ? (outs) / (NT) : 1 };                   \
        int r = r0;                                                            \
        for (; r + NR <= r1; r += NR) tile(j, r, NR, t0, NT);                  \
        if (NR > 4 && r + 4 <= r1) tile(j, r, 4, t0, NT), r += 4;              \
        if (NR > 2 && r + 2 <= r1) tile(j, r, 2, t0, NT), r += 2;              \
        for (; r < r1; r++) tile(j, r, 1, t0, NT);                             \
    } while (0)
#define KERN_DEFINE_ROWS(attr, name, tile, outs)                               \
    attr static void name(const KernJob *j, int r0, int r1, int t0, int nt) {  \
        switch (nt) {                                                          \
        case 1: KERN_ROWS_NT(tile, outs, 1); break;                            \
        case 2: KERN_ROWS_NT(tile, outs, 2); break;                            \
        case 3: KERN_ROWS_NT(tile, outs, 3); break;                            \
        default: KERN_ROWS_NT(tile, outs, 4); break;                           \
        }                                                                      \
    }

/* Software prefetch of the weight stream, which decode reads from DRAM (the hardware prefetchers
 * alone leave the kernels short of the read bandwidth). A tile walks nr rows side by side, so the
 * prefetch runs KERN_PREFETCH bytes ahead within each row when rows are long, and otherwise (expert
 * rows are under 2 KB) at the same column of the row nr below, i.e. in the next tile. */
#define KERN_PREFETCH 2048
static inline size_t kern_prefetch_ahead(size_t row_bytes, int nr) {
    return row_bytes >= 2 * KERN_PREFETCH ? KERN_PREFETCH : (size_t)nr * row_bytes;
}
#define KERN_PREFETCH_AT(p, ahead) __builtin_prefetch((const char *)(p) + (ahead), 0, 3)

/* Tile loops are unrolled so the accumulators live in registers. */
#define KERN_UNROLL _Pragma("GCC unroll 8")

/* The public kernels with the implementation pinned (an ISA the CPU lacks is a caller error). */
void kern_matmul_bf16_isa(KernIsa isa, Pool *pool, float *Y, const uint16_t *W, const float *X, int T, int rows,
                          int cols);
void kern_matmul_f32_isa(KernIsa isa, Pool *pool, float *Y, const float *W, const float *X, int T, int rows,
                         int cols);
void kern_matmul_mxfp4_isa(KernIsa isa, Pool *pool, float *Y, const uint8_t *packed, const uint8_t *scales,
                           const float *X, int T, int rows, int cols);
void kern_matmul_i8row_isa(KernIsa isa, Pool *pool, float *Y, const int8_t *W, const float *scales, const float *X,
                           int T, int rows, int cols);
float kern_dot_f32_isa(KernIsa isa, const float *a, const float *b, int n);

/* E8M0 scale byte s -> 2^(s-127) as a float: 0 -> 2^-127 (subnormal), 255 -> NaN. A table so the
 * SIMD paths fetch a block's scale with one broadcast load. kern_mxfp4.c. */
typedef union {
    uint32_t bits[256];
    float f[256];
} KernE8m0Table;
extern const KernE8m0Table kern_e8m0_table;

#endif

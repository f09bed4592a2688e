/* prod_cuda.cu - the matrix-product kernels of the CUDA device and their launcher (cuda_dev.h's
 * launch_products), in the CPU kernels' order; mat_cuda.cu's header comment says how each keeps
 * it. Y = W . X for any T, a batch of jobs (a layer's experts) and heads:
 *   stream_kernel:     weights streamed in 16-byte chunks, each read once for all X rows;
 *   coop_kernel:       the same walk, rows copied through shared memory a segment at a time
 *                      (decode);
 *   coop_tile_kernel:  the coop kernel over a tile of 2-8 X rows, X staged by segments beside
 *                      the weights (prefill chunks, verify passes);
 *   staged_kernel:     few output rows: whole rows (and X) copied to shared memory first;
 *   gemv_bf16_kernel:  BF16 decode (T = 1, one head);
 *   matmul_kernel:     everything else: a half warp per output, any shape;
 *   tmul_kernel:       the transposed per-head product.
 * bench_device times and checks every kernel by name (cuda_variant_name, cuda_time_variant). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/mat_cuda.h"
#include "util/err.h"

namespace dfcuda {
namespace {

constexpr unsigned FULL = 0xFFFFFFFFu;
constexpr int LANES = 16, ROWS_PER_BLOCK = 8, THREADS = LANES * ROWS_PER_BLOCK, UNROLL = 8;

template <int N> struct Batch {
    MulJob j[N];
};

/* A compile-time flag passed to a generic lambda. */
template <bool B> struct Flag {
    static constexpr bool value = B;
};

/* ---- exact weight expansion ---------------------------------------------------------------- */

/* MXFP4 weight of E2M1 code c under scale byte s, exactly E2M1[c] * 2^(s-127) as the CPU computes
 * it: the bits (c&8)<<28 | (c&7)<<22 are E2M1[c] * 2^-126 (zero and the subnormal 0.5 included),
 * and the products by powers of two below are exact (or overflow to infinity exactly where the
 * CPU's does); s = 255 gives NaN. */
__device__ __forceinline__ float mx_weight(uint32_t c, uint32_t s) {
    const float base = __uint_as_float(((c & 8u) << 28) | ((c & 7u) << 22));
    const float fa = __uint_as_float(s == 255u ? 0x7FC00000u : (min(s, 128u) + 126u) << 23); /* 2^(min(s,128)-1) */
    const float fb = __uint_as_float((max(s, 128u) - 1u) << 23);                            /* 2^(max(s,128)-128) */
    return __fmul_rn(__fmul_rn(base, fa), fb);
}

/* Weight (r, c), c < cols, expanded exactly to fp32. */
__device__ __forceinline__ float expand(const DevMat &w, int r, int c) {
    const size_t at = (size_t)r * (size_t)w.cols + (size_t)c;
    switch (w.fmt) {
    case WF_BF16: return __uint_as_float((uint32_t)((const uint16_t *)w.data)[at] << 16);
    case WF_F32: return ((const float *)w.data)[at];
    case WF_I8ROW: return __fmul_rn((float)((const int8_t *)w.data)[at], ((const float *)w.aux)[r]);
    default: {
        const uint8_t byte = ((const uint8_t *)w.data)[at / 2];
        return mx_weight((c & 1) ? byte >> 4 : byte & 15u, ((const uint8_t *)w.aux)[at / 32]);
    }
    }
}

/* The lane tree of kernels_impl.h over l[16], stored to *y. */
__device__ __forceinline__ void lanes_tree_store(const float *l, float *y) {
    float s8[8], s4[4];
#pragma unroll
    for (int i = 0; i < 8; i++) s8[i] = __fadd_rn(l[i], l[i + 8]);
#pragma unroll
    for (int i = 0; i < 4; i++) s4[i] = __fadd_rn(s8[i], s8[i + 4]);
    *y = __fadd_rn(__fadd_rn(s4[0], s4[2]), __fadd_rn(s4[1], s4[3]));
}

/* ---- the generic kernel: one half warp per output ------------------------------------------ */

/* acc[k] += w * x[t0 + k][c] for the tile's X rows (x_t floats apart), in the lane's order. */
template <int TILE_T>
__device__ __forceinline__ void fma_tile(float *acc, float wv, const float *__restrict__ X, size_t x_t, int t0, int nt,
                                         int c, bool in) {
#pragma unroll
    for (int k = 0; k < TILE_T; k++)
        if (k < nt) acc[k] = __fmaf_rn(wv, in ? X[(size_t)(t0 + k) * x_t + c] : 0.0f, acc[k]);
}

/* One output per half warp: lane l walks columns l, l+16, ... of its weight row once per tile of
 * TILE_T X rows, 8 weights loaded ahead of their multiply-adds. */
template <int TILE_T, int N>
__global__ void __launch_bounds__(THREADS) matmul_kernel(Batch<N> b, int T) {
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const DevMat &w = job.w;
    const Span &sp = job.sp;
    const float *__restrict__ X = job.X;
    float *__restrict__ Y = job.Y;
    const int lane = threadIdx.x & (LANES - 1);
    const int h = blockIdx.y;
    const int rr = blockIdx.x * ROWS_PER_BLOCK + (int)(threadIdx.x / LANES);
    const unsigned half = 0xFFFFu << (threadIdx.x & 16); /* this half warp's lanes */
    if (rr >= sp.n) return; /* the whole half warp shares rr */
    const int r = sp.row0 + h * sp.stride + rr;
    const float *__restrict__ Xh = X + (size_t)h * sp.x_h;
    const int full = w.cols / LANES; /* 16-column groups with no padding */
    for (int t0 = 0; t0 < T; t0 += TILE_T) {
        const int nt = T - t0 < TILE_T ? T - t0 : TILE_T;
        float acc[TILE_T];
#pragma unroll
        for (int k = 0; k < TILE_T; k++) acc[k] = 0.0f;
        int g = 0;
        for (; g + UNROLL <= full; g += UNROLL) {
            float wv[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) wv[u] = expand(w, r, (g + u) * LANES + lane);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) fma_tile<TILE_T>(acc, wv[u], Xh, sp.x_t, t0, nt, (g + u) * LANES + lane, true);
        }
        for (; g < full; g++)
            fma_tile<TILE_T>(acc, expand(w, r, g * LANES + lane), Xh, sp.x_t, t0, nt, g * LANES + lane, true);
        if (full * LANES < w.cols) { /* the last group, zero-padded as on the CPU */
            const int c = full * LANES + lane;
            const bool in = c < w.cols;
            fma_tile<TILE_T>(acc, in ? expand(w, r, c) : 0.0f, Xh, sp.x_t, t0, nt, c, in);
        }
#pragma unroll
        for (int k = 0; k < TILE_T; k++) {
            float a = acc[k];
            a = __fadd_rn(a, __shfl_down_sync(half, a, 8, LANES));
            a = __fadd_rn(a, __shfl_down_sync(half, a, 4, LANES));
            a = __fadd_rn(a, __shfl_down_sync(half, a, 2, LANES));
            a = __fadd_rn(a, __shfl_down_sync(half, a, 1, LANES));
            if (lane == 0 && k < nt) Y[(size_t)(t0 + k) * sp.y_t + (size_t)h * sp.n + rr] = a;
        }
    }
}

/* The transposed product of head h = blockIdx.y for X row t = blockIdx.z: output column i sums
 * x[j] * w[row j of the block][i] over j in order, one product then one sum per term, from +0
 * (the CPU's row-by-row axpy). */
__global__ void tmul_kernel(DevMat w, Span sp, const float *__restrict__ X, float *__restrict__ Y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, t = blockIdx.z;
    if (i >= w.cols) return;
    const float *__restrict__ x = X + (size_t)t * sp.x_t + (size_t)h * sp.x_h;
    float acc = 0.0f;
    for (int j = 0; j < sp.n; j++) acc = __fadd_rn(acc, __fmul_rn(x[j], expand(w, sp.row0 + h * sp.stride + j, i)));
    Y[((size_t)t * gridDim.y + h) * (size_t)w.cols + i] = acc;
}

/* ---- the streaming kernel ------------------------------------------------------------------ */

/* A format as the streaming kernel walks it: a weight row is split over TPR threads (per tile of X
 * rows), each holding LPT of the 16 lanes; one step of the row's threads covers STEP columns, one
 * 16-byte chunk per thread (BF16: half a 16-column group, 8 lanes; I8ROW: a group; MXFP4: two
 * groups, each 4-byte word the 8 columns of one half). */
template <int F> struct Fmt {
    static constexpr int TPR = F == WF_BF16 ? 2 : 1;
    static constexpr int LPT = LANES / TPR;
    static constexpr int STEP = F == WF_MXFP4 ? 32 : 16;
};

template <int F> __device__ __forceinline__ size_t row_bytes(int cols) {
    return F == WF_BF16 ? 2 * (size_t)cols : F == WF_I8ROW ? (size_t)cols : (size_t)cols / 2;
}

constexpr int OPT_HINT = 1; /* loads ask L2 for the 256 bytes around them (rows are read in sequence) */

template <int OPT> __device__ __forceinline__ uint4 load_chunk(const uint4 *p) {
    if constexpr ((OPT & OPT_HINT) != 0) {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p));
        return v;
    } else {
        return __ldcs(p);
    }
}

__device__ __forceinline__ void bf16_expand8(const uint4 q, float *w) {
    const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) w[2 * i] = __uint_as_float(v[i] << 16), w[2 * i + 1] = __uint_as_float(v[i] & 0xFFFF0000u);
}

/* Four int8 weights times the row scale: (float)q exactly (the bytes biased by 128 under the
 * exponent of 2^23, less 2^23 + 128), then the CPU's one multiply. */
__device__ __forceinline__ void i8_expand4(uint32_t v, float scale, float *w) {
    const uint32_t u = v ^ 0x80808080u;
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = __fmul_rn(__fsub_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | (unsigned)i)), 8388736.0f), scale);
}

/* E2M1 codes to fp16: the code's sign to bit 15 and its three magnitude bits to bits 9..11 give
 * E2M1 * 2^-14 exactly (0 and the subnormal 0.5 included), a single byte over a zero byte. For
 * the 8 codes of word v, pr[0] holds codes 0 and 2 (low, high half), pr[1] 1 and 3, pr[2] 4 and 6,
 * pr[3] 5 and 7. */
__device__ __forceinline__ void mx_pairs(uint32_t v, uint32_t *pr) {
    const uint32_t hi = (v & 0x80808080u) | ((v >> 3) & 0x0E0E0E0Eu);  /* byte b: code 2b + 1 */
    const uint32_t lo = ((v << 4) & 0x80808080u) | ((v << 1) & 0x0E0E0E0Eu); /* byte b: code 2b */
    pr[0] = __byte_perm(lo, 0, 0x1404), pr[1] = __byte_perm(hi, 0, 0x1404);
    pr[2] = __byte_perm(lo, 0, 0x3424), pr[3] = __byte_perm(hi, 0, 0x3424);
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

__device__ __forceinline__ void h2f2(uint32_t h, float &lo, float &hi) {
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;}" : "=f"(lo), "=f"(hi) : "r"(h));
}

/* The 8 weights of word v under scale byte s, exactly E2M1 * 2^(s-127). PATH 0 (s in [104, 128]):
 * one fp16 multiply by 2^(s-113) per pair, exact because the product is an fp16 number (normal or
 * subnormal); PATH 1 (s <= 240 or 255): one fp32 multiply; PATH 2 (any s): two. */
template <int PATH> __device__ __forceinline__ void mx_expand8(uint32_t v, uint32_t s, float *w) {
    uint32_t pr[4];
    mx_pairs(v, pr);
    if constexpr (PATH == 0) {
        const uint32_t f2 = ((s - 98u) << 10) * 0x00010001u;
#pragma unroll
        for (int i = 0; i < 4; i++) pr[i] = hmul2(pr[i], f2);
    }
    h2f2(pr[0], w[0], w[2]), h2f2(pr[1], w[1], w[3]), h2f2(pr[2], w[4], w[6]), h2f2(pr[3], w[5], w[7]);
    if constexpr (PATH >= 1) {
        const float fa = __uint_as_float(s == 255u ? 0x7FC00000u : (min(s, 240u) + 14u) << 23); /* 2^(min(s,240)-113) */
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = __fmul_rn(w[i], fa);
    }
    if constexpr (PATH == 2) {
        const float fb = __uint_as_float((max(s, 240u) - 113u) << 23); /* 2^(max(s,240)-240) */
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = __fmul_rn(w[i], fb);
    }
}

/* What a thread of the streaming kernel walks: its chunks (step k at w[k * TPR]), the row's MXFP4
 * scales or I8ROW scale, and X: row t of the tile at xr[t] (the thread's first column; a tile row
 * past T repeats the last, whose sums are never stored), in device or shared memory (XS). */
template <int NT> struct RowWalk {
    const uint4 *__restrict__ w;
    const uint8_t *__restrict__ s;
    float scale;
    const float *xr[NT];
};

template <bool XS> __device__ __forceinline__ float4 load_x4(const float *p) {
    if constexpr (XS) return *(const float4 *)p;
    else return __ldg((const float4 *)p);
}

/* acc[t][l0 + i] += w[i] * x[t][c + i], i < 8, for every row t of the tile (no branch: the loads of
 * a block of steps are all issued before their multiply-adds). */
template <int NT, int LPT, bool XS>
__device__ __forceinline__ void fma8(float (&acc)[NT][LPT], int l0, const float *w, const RowWalk<NT> &rw, size_t c) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4 a = load_x4<XS>(rw.xr[t] + c), b = load_x4<XS>(rw.xr[t] + c + 4);
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) acc[t][l0 + i] = __fmaf_rn(w[i], xv[i], acc[t][l0 + i]);
    }
}

/* The chunks of steps [k0, k0 + UU) (and their scales), loaded. */
template <int F, int NT, int UU, int OPT>
__device__ __forceinline__ void load_steps(uint4 *q, uint32_t *s, const RowWalk<NT> &rw, int k0) {
#pragma unroll
    for (int u = 0; u < UU; u++) {
        q[u] = load_chunk<OPT>(rw.w + (size_t)(k0 + u) * Fmt<F>::TPR);
        if constexpr (F == WF_MXFP4) s[u] = __ldg(rw.s + k0 + u);
    }
}

template <int NT, int UU, int PATH, bool XS>
__device__ __forceinline__ void mx_steps(float (&acc)[NT][LANES], const uint4 *q, const uint32_t *s, const RowWalk<NT> &rw,
                                         int k0) {
#pragma unroll
    for (int u = 0; u < UU; u++) {
        const uint32_t v[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
        for (int j = 0; j < 4; j++) { /* word j: columns 8j.. of the chunk, lanes 8(j&1).. */
            float w[8];
            mx_expand8<PATH>(v[j], s[u], w);
            fma8<NT, LANES, XS>(acc, 8 * (j & 1), w, rw, (size_t)(k0 + u) * Fmt<WF_MXFP4>::STEP + 8 * j);
        }
    }
}

/* MXFP4 scale bytes PATH 0 of mx_expand8 takes. */
constexpr uint32_t MX_FAST_LO = 104, MX_FAST_HI = 128;

/* Whether every scale byte of the N words w lies in [MX_FAST_LO, MX_FAST_HI]. */
template <int N> __device__ __forceinline__ bool mx_all_fast(const uint32_t *w) {
    bool ok = true;
#pragma unroll
    for (int i = 0; i < N; i++) ok = ok && __vminu4(__vmaxu4(w[i], MX_FAST_LO * 0x01010101u), MX_FAST_HI * 0x01010101u) == w[i];
    return ok;
}

/* The multiply-adds of steps [k0, k0 + UU), loaded in q and s, in column order. MX_FAST: the warp
 * knows that every MXFP4 scale byte of these steps takes PATH 0. */
template <int F, int NT, int UU, int OPT, bool XS, bool MX_FAST = false>
__device__ __forceinline__ void walk_steps(float (&acc)[NT][Fmt<F>::LPT], const uint4 *q, const uint32_t *s,
                                           const RowWalk<NT> &rw, int k0) {
    using FT = Fmt<F>;
    if constexpr (F == WF_BF16) {
#pragma unroll
        for (int u = 0; u < UU; u++) {
            float w[8];
            bf16_expand8(q[u], w);
            fma8<NT, FT::LPT, XS>(acc, 0, w, rw, (size_t)(k0 + u) * FT::STEP);
        }
    } else if constexpr (F == WF_I8ROW) {
#pragma unroll
        for (int u = 0; u < UU; u++) {
            const uint32_t v[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
            float w[16];
#pragma unroll
            for (int j = 0; j < 4; j++) i8_expand4(v[j], rw.scale, w + 4 * j);
            fma8<NT, FT::LPT, XS>(acc, 0, w, rw, (size_t)(k0 + u) * FT::STEP);
            fma8<NT, FT::LPT, XS>(acc, 8, w + 8, rw, (size_t)(k0 + u) * FT::STEP + 8);
        }
    } else if constexpr (MX_FAST) {
        mx_steps<NT, UU, 0, XS>(acc, q, s, rw, k0);
    } else {
        /* the warp agrees on the cheapest exact scaling for all its chunks */
        bool fast = true, mid = true;
#pragma unroll
        for (int u = 0; u < UU; u++)
            fast = fast && s[u] - MX_FAST_LO <= MX_FAST_HI - MX_FAST_LO, mid = mid && (s[u] <= 240u || s[u] == 255u);
        if (__all_sync(FULL, fast)) mx_steps<NT, UU, 0, XS>(acc, q, s, rw, k0);
        else if (__all_sync(FULL, mid)) mx_steps<NT, UU, 1, XS>(acc, q, s, rw, k0);
        else mx_steps<NT, UU, 2, XS>(acc, q, s, rw, k0);
    }
}

/* A thread's sums of its row for the first nt X rows of its tile, through the lane tree, to
 * y[t * y_t] (BF16: the pair's part 0 stores, after the pair trades halves so it holds lanes 0-15). */
template <int F, int NT>
__device__ __forceinline__ void store_sums(const float (&acc)[NT][Fmt<F>::LPT], int p, bool valid, int nt, float *y,
                                           size_t y_t) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float l[LANES];
        if constexpr (Fmt<F>::TPR == 1) {
#pragma unroll
            for (int i = 0; i < LANES; i++) l[i] = acc[t][i];
        } else { /* lanes 0-7 in part 0, 8-15 in part 1: the pair trades halves */
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float other = __shfl_xor_sync(FULL, acc[t][i], 1);
                l[i] = p ? other : acc[t][i], l[i + 8] = p ? acc[t][i] : other;
            }
        }
        if (valid && p == 0 && t < nt) lanes_tree_store(l, y + (size_t)t * y_t);
    }
}

/* Y = W . X for the block's rows: thread (row, tile, part) holds LPT lanes of its weight row for X
 * rows [tile * NT, + NT) of T; its lanes' columns are walked in order, in blocks of U steps whose
 * chunks are loaded while the block before is multiplied (two buffers). XS: X (T rows) is first
 * copied to shared memory, after the first block's loads are on their way. */
template <int F, int NT, int U, int OPT, bool XS, int N>
__global__ void __launch_bounds__(256) stream_kernel(Batch<N> b, int T, int tiles) {
    using FT = Fmt<F>;
    extern __shared__ float4 xs4[];
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const Span &sp = job.sp;
    const int per_row = FT::TPR * tiles;
    const int p = (int)threadIdx.x % FT::TPR, tile = (int)threadIdx.x / FT::TPR % tiles;
    const int rr = (int)blockIdx.x * ((int)blockDim.x / per_row) + (int)threadIdx.x / per_row;
    const int h = blockIdx.y;
    const bool valid = rr < sp.n; /* a row past the end walks row 0: the warp's votes need every thread */
    const size_t row = (size_t)(sp.row0 + h * sp.stride + (valid ? rr : 0));
    const int cols = job.w.cols, steps = cols / FT::STEP, full = steps / U * U;
    const int t0 = tile * NT, nt = T - t0 < NT ? T - t0 : NT;
    RowWalk<NT> rw;
    rw.w = (const uint4 *)((const uint8_t *)job.w.data + row * row_bytes<F>(cols)) + p;
    rw.s = F == WF_MXFP4 ? (const uint8_t *)job.w.aux + row * (size_t)(cols / 32) : nullptr;
    rw.scale = F == WF_I8ROW ? ((const float *)job.w.aux)[row] : 0.0f;
    uint4 qa[U], qb[U];
    uint32_t sa[U], sb[U];
    if (full) load_steps<F, NT, U, OPT>(qa, sa, rw, 0);
    const float *xbase = job.X + (size_t)h * sp.x_h;
    size_t x_t = sp.x_t;
    if constexpr (XS) { /* every thread's X rows, all T of them, row after row */
        const int q4 = cols / 4;
        for (int i = threadIdx.x; i < T * q4; i += blockDim.x)
            xs4[i] = __ldg((const float4 *)(xbase + (size_t)(i / q4) * sp.x_t) + i % q4);
        __syncthreads();
        xbase = (const float *)xs4, x_t = (size_t)cols;
    }
#pragma unroll
    for (int t = 0; t < NT; t++) rw.xr[t] = xbase + (size_t)(t0 + (t < nt ? t : nt - 1)) * x_t + p * FT::LPT;
    float acc[NT][FT::LPT];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int i = 0; i < FT::LPT; i++) acc[t][i] = 0.0f;
    for (int k = 0; k < full; k += 2 * U) {
        if (k + U < full) load_steps<F, NT, U, OPT>(qb, sb, rw, k + U);
        walk_steps<F, NT, U, OPT, XS>(acc, qa, sa, rw, k);
        if (k + 2 * U < full) load_steps<F, NT, U, OPT>(qa, sa, rw, k + 2 * U);
        if (k + U < full) walk_steps<F, NT, U, OPT, XS>(acc, qb, sb, rw, k + U);
    }
    for (int k = full; k < steps; k++) {
        load_steps<F, NT, 1, OPT>(qa, sa, rw, k);
        walk_steps<F, NT, 1, OPT, XS>(acc, qa, sa, rw, k);
    }
    store_sums<F, NT>(acc, p, valid, nt, job.Y + (size_t)t0 * sp.y_t + (size_t)h * sp.n + rr, sp.y_t);
}

/* ---- the staged kernel (few rows) ---------------------------------------------------------- */

constexpr int STAGED_THREADS = 256;

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\n cp.async.wait_group 0;" ::: "memory");
}

/* Weight c of a row staged at wr (row r of the matrix: its scales are read from device memory). */
template <int F> __device__ __forceinline__ float staged_weight(const uint8_t *wr, const DevMat &w, size_t r, int c) {
    if constexpr (F == WF_BF16) return __uint_as_float((uint32_t)((const uint16_t *)wr)[c] << 16);
    else if constexpr (F == WF_I8ROW) return __fmul_rn((float)((const int8_t *)wr)[c], ((const float *)w.aux)[r]);
    else {
        const uint8_t byte = wr[c / 2];
        return mx_weight((c & 1) ? byte >> 4 : byte & 15u, ((const uint8_t *)w.aux)[r * (size_t)(w.cols / 32) + c / 32]);
    }
}

/* Rows [blockIdx.x * rpb, + rpb) of head blockIdx.y, and with XS the T rows of X, copied to shared
 * memory with every copy in flight at once; then each half warp walks one (row, X row) output:
 * lane l its columns in order, the lanes summed by the tree. Columns are a multiple of 16. */
template <int F, bool XS, int N>
__global__ void __launch_bounds__(STAGED_THREADS) staged_kernel(Batch<N> b, int T, int rpb) {
    extern __shared__ uint4 sw[];
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const Span &sp = job.sp;
    const int h = blockIdx.y, r0 = blockIdx.x * rpb;
    const int nr = sp.n - r0 < rpb ? sp.n - r0 : rpb;
    if (nr <= 0) return;
    const int cols = job.w.cols;
    const size_t rb = row_bytes<F>(cols), first = (size_t)(sp.row0 + h * sp.stride + r0);
    const uint4 *src = (const uint4 *)((const uint8_t *)job.w.data + first * rb);
    const int chunks = (int)((size_t)nr * rb / 16);
    for (int i = threadIdx.x; i < chunks; i += STAGED_THREADS) cp_async16(sw + i, src + i);
    const float *xh = job.X + (size_t)h * sp.x_h;
    float *xs = (float *)(sw + (size_t)rpb * rb / 16);
    if constexpr (XS) {
        const int q4 = cols / 4;
        for (int i = threadIdx.x; i < T * q4; i += STAGED_THREADS)
            cp_async16((float4 *)xs + i, (const float4 *)(xh + (size_t)(i / q4) * sp.x_t) + i % q4);
    }
    cp_async_wait_all();
    __syncthreads();
    const int lane = threadIdx.x & (LANES - 1), slot = threadIdx.x / LANES;
    const unsigned half = 0xFFFFu << (threadIdx.x & 16);
    for (int o = slot; o < nr * T; o += STAGED_THREADS / LANES) {
        const int i = o % nr, t = o / nr;
        const uint8_t *wr = (const uint8_t *)sw + (size_t)i * rb;
        const float *x = XS ? xs + (size_t)t * cols : xh + (size_t)t * sp.x_t;
        float acc = 0.0f;
#pragma unroll 16
        for (int c = lane; c < cols; c += LANES) acc = __fmaf_rn(staged_weight<F>(wr, job.w, first + i, c), x[c], acc);
        acc = __fadd_rn(acc, __shfl_down_sync(half, acc, 8, LANES));
        acc = __fadd_rn(acc, __shfl_down_sync(half, acc, 4, LANES));
        acc = __fadd_rn(acc, __shfl_down_sync(half, acc, 2, LANES));
        acc = __fadd_rn(acc, __shfl_down_sync(half, acc, 1, LANES));
        if (lane == 0) job.Y[(size_t)t * sp.y_t + (size_t)h * sp.n + r0 + i] = acc;
    }
}

/* ---- the coop kernel ----------------------------------------------------------------------- */

/* The streaming kernel's thread walks one weight row, so a warp's 16-byte loads land in 32
 * different rows: 32 cache lines per load, and the L1 pipe, not DRAM, set its pace (MXFP4 at 35-40%
 * of HBM bandwidth). Here each warp copies its rows' next G bytes into shared memory together
 * (cp.async, 16 bytes a lane, one load instruction covering whole row segments: few cache lines),
 * ST stages ahead, and each thread reads its rows' chunks from there (16-byte reads laid out so
 * that a warp's reads fall on distinct banks: coop_pitch). A lane's copies and a row's MXFP4 scale
 * bytes (read a segment ahead of their use) cost a few instructions a segment: the walk itself is
 * what the SMs issue. Each thread keeps the streaming kernel's
 * walk (its lanes' columns in order, walk_steps), so the sums are the CPU kernels'. A block is W
 * warps. One X row (XS) is copied to shared memory first, shared by the block; NT > 1 rows (a tile:
 * rows past T repeat the last, never stored) are read through the read-only cache, each weight
 * expanded once for all of them (the tiles pay only for MXFP4 past 4 rows: auto_launch). Rows must
 * hold whole segments; one head. Measured on an H200 (docs/PERFORMANCE.md "Kernel rates"): copies
 * by the copy engine instead (cp.async.bulk, one per row segment) ran at 0.55-0.67 TB/s, a 256-byte
 * copy costing the engine about 50 ns; blocks of one warp reading X from device memory sat at 12%
 * occupancy; two rows per thread (each X value serving both) lost to the registers and shared
 * memory they took. */
constexpr int COOP_ALIGN = 256; /* row bytes the coop kernel takes are a multiple of this (every G) */

/* How a warp's stage holds its rows' segments of G bytes. BF16 and MXFP4: rows G bytes apart, the
 * 16-byte chunk c of row i at c ^ swizzle_key(i), so that the 8 threads of a quarter warp, reading
 * the same chunk of 8 rows (BF16: two chunks of 4 rows), find it in 8 different bank groups; I8ROW
 * (which reads twice as many chunks a weight, and measured slower swizzled: 40-42 against 31.5-32
 * us for 12288 x 7168): rows G + 16 bytes apart, which does the same for it. */
template <int F> __host__ __device__ constexpr bool coop_swizzled() { return F != WF_I8ROW; }
template <int F, int G> __host__ __device__ constexpr int coop_pitch() { return coop_swizzled<F>() ? G : G + 16; }
template <int F> __device__ __forceinline__ int swizzle_key(int i) {
    return coop_swizzled<F>() ? (i & (8 / Fmt<F>::TPR - 1)) * Fmt<F>::TPR : 0;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int K> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(K) : "memory"); }

/* The G / 16 scale bytes of one row segment (one per 16-byte chunk), as words. */
template <int G> __device__ __forceinline__ void segment_scales(const uint8_t *p, uint32_t *w) {
    if constexpr (G == 256) {
        const uint4 v = __ldg((const uint4 *)p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
        const uint2 v = __ldg((const uint2 *)p);
        w[0] = v.x, w[1] = v.y;
    }
}

/* Which 16 bytes of a segment of G bytes each lane of a warp copies into the warp's stage: the
 * same chunk (lane % CH) of every RSTEP-th of the warp's rows, from row lane / CH; COPIES copies a
 * segment, their offsets within it computed once (rows past the span's last copy it: `last`). */
template <int F, int G> struct WarpCopies {
    static constexpr int CH = G / 16, ROWS_W = 32 / Fmt<F>::TPR, PITCH = coop_pitch<F, G>();
    static constexpr int RSTEP = 32 / CH, COPIES = ROWS_W / RSTEP, STAGE = ROWS_W * PITCH; /* a stage's bytes */
    static_assert(32 % CH == 0 && ROWS_W % RSTEP == 0, "a warp's copies of a segment are whole rows");
    uint32_t src_at[COPIES], dst_at[COPIES]; /* rb * ROWS_W is well within 32 bits */

    __device__ __forceinline__ WarpCopies(int lane, int last, size_t rb) {
#pragma unroll
        for (int m = 0; m < COPIES; m++) {
            const int i = lane / CH + m * RSTEP, k = lane % CH;
            src_at[m] = (uint32_t)min(i, max(last, 0)) * (uint32_t)rb + (uint32_t)k * 16u;
            dst_at[m] = (uint32_t)(i * PITCH + (k ^ swizzle_key<F>(i)) * 16);
        }
    }
    /* The lane's copies of the segment at seg (in the warp's first row) into the stage at dst. */
    __device__ __forceinline__ void copy(uint8_t *dst, const uint8_t *seg) const {
#pragma unroll
        for (int m = 0; m < COPIES; m++) cp_async16(dst + dst_at[m], seg + src_at[m]);
    }
};

/* A thread's walk of one staged segment of its row (src: its row in the stage, chunk c at c ^ swz;
 * sw: the segment's MXFP4 scale bytes), steps k0.. of the walk (the X columns rw points at). The
 * warp decides MXFP4's scaling once for the segment when every scale byte takes the cheapest (else
 * once per U steps, in walk_steps). */
template <int F, int NT, int G, bool XS>
__device__ __forceinline__ void walk_segment(float (&acc)[NT][Fmt<F>::LPT], const uint4 *src, int p, int swz,
                                             const uint32_t *sw, const RowWalk<NT> &rw, int k0) {
    using FT = Fmt<F>;
    constexpr int SPT = G / 16 / FT::TPR, U = F == WF_BF16 ? 4 : 2; /* steps of a segment; steps per load */
    auto walk = [&](auto mx_fast) {
#pragma unroll
        for (int u0 = 0; u0 < SPT; u0 += U) {
            uint4 qv[U];
            uint32_t sv[U] = {};
#pragma unroll
            for (int u = 0; u < U; u++) {
                qv[u] = src[((u0 + u) * FT::TPR + p) ^ swz];
                if constexpr (F == WF_MXFP4) sv[u] = __byte_perm(sw[(u0 + u) / 4], 0, 0x4440 | ((u0 + u) % 4));
            }
            walk_steps<F, NT, U, 0, XS, decltype(mx_fast)::value>(acc, qv, sv, rw, k0 + u0);
        }
    };
    if constexpr (F == WF_MXFP4) {
        if (__all_sync(FULL, mx_all_fast<G / 64>(sw))) walk(Flag<true>{});
        else walk(Flag<false>{});
    } else {
        walk(Flag<false>{});
    }
}

/* Where a coop kernel's thread sits: its part p of its row, the row's slot in the warp, the warp's
 * first row, and the row it walks (past the span: the span's last, its sums never stored). */
template <int F> struct CoopRow {
    static constexpr int ROWS_W = 32 / Fmt<F>::TPR;
    int p, slot, base, rr;
    bool valid;
    size_t row;
    __device__ __forceinline__ CoopRow(const Span &sp, int lane, int warp, int W) {
        p = lane % Fmt<F>::TPR, slot = lane / Fmt<F>::TPR;
        base = ((int)blockIdx.x * W + warp) * ROWS_W; /* the warp's first row (of the span) */
        rr = base + slot, valid = rr < sp.n;
        row = (size_t)sp.row0 + (size_t)(valid ? rr : sp.n - 1);
    }
    /* The warp's first row's bytes (past the span: its last row's). */
    __device__ __forceinline__ const uint8_t *warp_rows(const MulJob &job, size_t rb) const {
        return (const uint8_t *)job.w.data + ((size_t)job.sp.row0 + (size_t)(base < job.sp.n ? base : job.sp.n - 1)) * rb;
    }
};

/* A coop thread's MXFP4 scale bytes (one per chunk), each segment's loaded a segment ahead of its
 * use: the warps would otherwise wait on the load at the segment's start. Nothing for the others. */
template <int F, int G> struct ScalesAhead {
    static constexpr int WORDS = G / 64;
    const uint8_t *scales;
    uint32_t next[WORDS] = {};
    __device__ __forceinline__ ScalesAhead(const MulJob &job, size_t row)
        : scales(F == WF_MXFP4 ? (const uint8_t *)job.w.aux + row * (size_t)(job.w.cols / 32) : nullptr) {
        if constexpr (F == WF_MXFP4) segment_scales<G>(scales, next);
    }
    /* Segment g's scale bytes to sw; segment g + 1's (of nseg) on their way. */
    __device__ __forceinline__ void take(int g, int nseg, uint32_t (&sw)[WORDS]) {
#pragma unroll
        for (int i = 0; i < WORDS; i++) sw[i] = next[i];
        if constexpr (F == WF_MXFP4)
            if (g + 1 < nseg) segment_scales<G>(scales + (size_t)(g + 1) * (G / 16), next);
    }
};

template <int NT, int LPT> __device__ __forceinline__ void zero_sums(float (&acc)[NT][LPT]) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int i = 0; i < LPT; i++) acc[t][i] = 0.0f;
}

template <int F, int NT, bool XS, int ST, int G, int W, int N>
__global__ void __launch_bounds__(32 * W) coop_kernel(Batch<N> b, int T) {
    using FT = Fmt<F>;
    using WC = WarpCopies<F, G>;
    constexpr int SPT = G / 16 / FT::TPR; /* steps of a segment */
    extern __shared__ __align__(16) uint8_t sm[];
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const Span &sp = job.sp;
    const int cols = job.w.cols, lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const size_t rb = row_bytes<F>(cols);
    const int nseg = (int)(rb / G);
    float *xs = (float *)sm;
    uint8_t *buf = sm + (XS ? (size_t)cols * sizeof(float) : 0) + (size_t)warp * ST * WC::STAGE;
    const CoopRow<F> cr(sp, lane, warp, W);
    const uint8_t *wdata = cr.warp_rows(job, rb);
    const WC wc(lane, sp.n - 1 - cr.base, rb);
    auto issue = [&](int st, int g) { /* segment g of the warp's rows into stage st */
        wc.copy(buf + (size_t)st * WC::STAGE, wdata + (size_t)g * G);
        cp_async_commit();
    };
    if constexpr (XS)
        for (int i = (int)threadIdx.x; i < cols / 4; i += 32 * W) cp_async16((float4 *)xs + i, (const float4 *)job.X + i);
    cp_async_commit();
#pragma unroll
    for (int g = 0; g < ST; g++) {
        if (g < nseg) issue(g, g);
        else cp_async_commit(); /* an empty group: the waits below count ST groups ahead */
    }
    if constexpr (XS) {
        cp_async_wait<ST>(); /* this thread's part of X is in */
        __syncthreads();     /* and every thread's */
    }
    RowWalk<NT> rw;
    rw.scale = F == WF_I8ROW ? ((const float *)job.w.aux)[cr.row] : 0.0f;
#pragma unroll
    for (int t = 0; t < NT; t++) rw.xr[t] = (XS ? xs : job.X + (size_t)(t < T ? t : T - 1) * sp.x_t) + cr.p * FT::LPT;
    float acc[NT][FT::LPT];
    zero_sums(acc);
    const uint4 *const mine = (const uint4 *)(buf + (size_t)cr.slot * WC::PITCH); /* the thread's row in stage 0 */
    const int swz = swizzle_key<F>(cr.slot);
    ScalesAhead<F, G> ahead(job, cr.row);
    for (int g = 0; g < nseg; g++) {
        const int st = g % ST;
        uint32_t sw[G / 64]; /* segment g's scale bytes */
        ahead.take(g, nseg, sw);
        cp_async_wait<ST - 1>(); /* this lane's copies of segment g are in */
        __syncwarp();            /* and every lane's */
        walk_segment<F, NT, G, XS>(acc, mine + (size_t)st * WC::STAGE / 16, cr.p, swz, sw, rw, g * SPT);
        __syncwarp(); /* every lane is done reading stage st before it is refilled */
        if (g + ST < nseg) issue(st, g + ST);
        else cp_async_commit();
    }
    store_sums<F, NT>(acc, cr.p, cr.valid, T, job.Y + cr.rr, sp.y_t);
}

/* ---- the coop tile kernel ------------------------------------------------------------------ */

/* The coop kernel for a tile of T <= NT X rows (prefill chunks, verify passes): the same warps, rows
 * and weight stages, but the block also copies each segment's columns of the tile's X rows into a
 * stage of its own beside the weights, so the walk reads X from shared memory (in the coop kernel
 * over several rows, X comes through the read-only cache: NT loads per 8 weights from device memory
 * paced the walk). The block's warps move through the segments together: after the waits, a
 * barrier makes every thread's copies of segment g (weights and X) visible to all; after the walk,
 * a second one frees the stage for segment g + ST. Every weight is expanded once for the tile. */
template <int F, int G> __host__ __device__ constexpr int segment_cols() {
    return F == WF_BF16 ? G / 2 : F == WF_I8ROW ? G : 2 * G;
}

template <int F, int NT, int ST, int G, int W, int N>
__global__ void __launch_bounds__(32 * W) coop_tile_kernel(Batch<N> b, int T) {
    using FT = Fmt<F>;
    using WC = WarpCopies<F, G>;
    constexpr int SEGC = segment_cols<F, G>(), XQ = SEGC / 4; /* X: columns and 16-byte chunks a segment */
    extern __shared__ __align__(16) uint8_t sm[];
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const Span &sp = job.sp;
    const int cols = job.w.cols, lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const size_t rb = row_bytes<F>(cols);
    const int nseg = (int)(rb / G), nx = T < NT ? T : NT; /* the X rows copied */
    float *const xst = (float *)sm;                        /* ST stages of NT rows of SEGC floats */
    uint8_t *const buf = sm + sizeof(float) * ST * NT * SEGC + (size_t)warp * ST * WC::STAGE;
    const CoopRow<F> cr(sp, lane, warp, W);
    const uint8_t *wdata = cr.warp_rows(job, rb);
    const WC wc(lane, sp.n - 1 - cr.base, rb);
    auto issue = [&](int st, int g) { /* segment g of the warp's rows, and of X, into stage st */
        wc.copy(buf + (size_t)st * WC::STAGE, wdata + (size_t)g * G);
        for (int i = (int)threadIdx.x; i < nx * XQ; i += 32 * W) {
            const int t = i / XQ, q = i % XQ;
            cp_async16(xst + ((size_t)(st * NT + t) * SEGC + (size_t)q * 4),
                       job.X + (size_t)t * sp.x_t + (size_t)g * SEGC + (size_t)q * 4);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int g = 0; g < ST; g++) {
        if (g < nseg) issue(g, g);
        else cp_async_commit(); /* an empty group: the waits below count ST groups ahead */
    }
    RowWalk<NT> rw;
    rw.scale = F == WF_I8ROW ? ((const float *)job.w.aux)[cr.row] : 0.0f;
    float acc[NT][FT::LPT];
    zero_sums(acc);
    const uint4 *const mine = (const uint4 *)(buf + (size_t)cr.slot * WC::PITCH);
    const int swz = swizzle_key<F>(cr.slot);
    ScalesAhead<F, G> ahead(job, cr.row);
    for (int g = 0; g < nseg; g++) {
        const int st = g % ST;
        uint32_t sw[G / 64];
        ahead.take(g, nseg, sw);
        cp_async_wait<ST - 1>(); /* this thread's copies of segment g are in */
        __syncthreads();         /* and every thread's */
#pragma unroll
        for (int t = 0; t < NT; t++) /* tile rows past T repeat the last (their sums are never stored) */
            rw.xr[t] = xst + (size_t)(st * NT + (t < nx ? t : nx - 1)) * SEGC + cr.p * FT::LPT;
        walk_segment<F, NT, G, true>(acc, mine + (size_t)st * WC::STAGE / 16, cr.p, swz, sw, rw, 0);
        __syncthreads(); /* every thread is done reading stage st before it is refilled */
        if (g + ST < nseg) issue(st, g + ST);
        else cp_async_commit();
    }
    store_sums<F, NT>(acc, cr.p, cr.valid, T, job.Y + cr.rr, sp.y_t);
}

/* ---- the BF16 decode kernel ---------------------------------------------------------------- */

/* T = 1, one head: four threads per row, each loading 8 bytes (4 consecutive columns) per 16-column
 * group, so thread t holds lanes 4t..4t+3, each lane's columns in order; the four add their lanes by
 * the fixed tree (two levels by shuffles, two in thread 0). Blocks of one warp (8 rows): on an H200
 * a 12288 x 7168 product took 63 us in blocks of 32 threads against 127 us in blocks of 64 to 256. */
constexpr int GV_THREADS = 32, GV_TPR = 4, GV_UNROLL = 16;

template <int OPT> __device__ __forceinline__ uint2 load_half_chunk(const uint2 *p) {
    if constexpr ((OPT & OPT_HINT) != 0) {
        uint2 v;
        asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
        return v;
    } else {
        return __ldcs(p);
    }
}

__device__ __forceinline__ void fma_bf16x4(float *acc, uint2 w, float4 x) {
    acc[0] = __fmaf_rn(__uint_as_float(w.x << 16), x.x, acc[0]);
    acc[1] = __fmaf_rn(__uint_as_float(w.x & 0xFFFF0000u), x.y, acc[1]);
    acc[2] = __fmaf_rn(__uint_as_float(w.y << 16), x.z, acc[2]);
    acc[3] = __fmaf_rn(__uint_as_float(w.y & 0xFFFF0000u), x.w, acc[3]);
}

template <int OPT, int N> __global__ void __launch_bounds__(GV_THREADS) gemv_bf16_kernel(Batch<N> b) {
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const int t = threadIdx.x & (GV_TPR - 1), r = blockIdx.x * (GV_THREADS / GV_TPR) + (int)(threadIdx.x / GV_TPR);
    const bool valid = r < job.sp.n;
    const int cols = job.w.cols, groups = valid ? cols / 16 : 0;
    const size_t row = (size_t)job.sp.row0 + (size_t)(valid ? r : 0);
    const uint2 *__restrict__ wrow = (const uint2 *)((const uint16_t *)job.w.data + row * (size_t)cols) + t;
    const float4 *__restrict__ x = (const float4 *)job.X + t;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int g = 0;
    for (; g + GV_UNROLL <= groups; g += GV_UNROLL) {
        uint2 wv[GV_UNROLL];
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++) wv[u] = load_half_chunk<OPT>(wrow + 4 * (g + u));
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++) fma_bf16x4(acc, wv[u], __ldg(x + 4 * (g + u)));
    }
    for (; g < groups; g++) fma_bf16x4(acc, load_half_chunk<OPT>(wrow + 4 * g), __ldg(x + 4 * g));
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = __fadd_rn(acc[i], __shfl_xor_sync(FULL, acc[i], 2));
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = __fadd_rn(s[i], __shfl_xor_sync(FULL, s[i], 1));
    if (valid && t == 0) job.Y[r] = __fadd_rn(__fadd_rn(s[0], s[2]), __fadd_rn(s[1], s[3]));
}

/* ---- launching ----------------------------------------------------------------------------- */

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The X rows one launch of the streaming and staged kernels takes (more: several launches). */
constexpr int T_MAX = 16, NT_MAX = 4;

/* Whether jobs fit the streaming and staged kernels: BF16, I8ROW or MXFP4 weights whose rows
 * start on 16-byte boundaries and hold whole steps, activations on 16-byte boundaries. */
bool streamable(const MulJob *jobs, int n, int heads) {
    for (int i = 0; i < n; i++) {
        const MulJob &j = jobs[i];
        const int f = j.w.fmt, cols = j.w.cols;
        const int step = f == WF_MXFP4 ? 32 : 16;
        if ((f != WF_BF16 && f != WF_I8ROW && f != WF_MXFP4) || cols % step || !aligned16(j.w.data) || !aligned16(j.X))
            return false;
        if (j.sp.x_t % 4 || (heads > 1 && j.sp.x_h % 4)) return false;
        if (f != jobs[0].w.fmt) return false;
    }
    return true;
}

struct Shape {
    int rows, cols, heads, n, T;
};

template <int N> Batch<N> batch_of(const MulJob *jobs, int n, Shape *s) {
    Batch<N> b;
    s->rows = s->cols = 0;
    for (int i = 0; i < n; i++) {
        b.j[i] = jobs[i];
        s->rows = jobs[i].sp.n > s->rows ? jobs[i].sp.n : s->rows;
        s->cols = jobs[i].w.cols > s->cols ? jobs[i].w.cols : s->cols;
    }
    return b;
}

/* Shared memory a block may take without asking the driver for more. */
constexpr size_t SMEM_DEFAULT = 48 * 1024;

/* Whether kernel k may take smem bytes of shared memory a block: past *granted (what was asked of
 * the driver for it before; SMEM_DEFAULT at first), asked now. Under d->mu. */
template <typename K> bool smem_granted(CudaDevice *d, K k, size_t smem, size_t *granted) {
    if (smem <= *granted) return true;
    if (!check(d, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), "coop kernel shared memory"))
        return false;
    *granted = smem;
    return true;
}

template <int F, int NT, int U, int OPT, bool XS, int N>
void stream_go(CudaDevice *d, const Batch<N> &b, const Shape &s, int tiles, int threads) {
    const int rpb = threads / (Fmt<F>::TPR * tiles);
    const dim3 grid((unsigned)((s.rows + rpb - 1) / rpb), (unsigned)s.heads, (unsigned)s.n);
    const size_t smem = XS ? sizeof(float) * (size_t)s.T * (size_t)s.cols : 0;
    stream_kernel<F, NT, U, OPT, XS, N><<<grid, threads, smem, d->stream>>>(b, s.T, tiles);
}

template <int F, int NT, int U, int OPT, bool XS, int N>
void stream_go_xs(CudaDevice *d, const Batch<N> &b, const Shape &s, int tiles, int threads) {
    if (XS && sizeof(float) * (size_t)s.T * (size_t)s.cols <= SMEM_DEFAULT) stream_go<F, NT, U, OPT, XS, N>(d, b, s, tiles, threads);
    else stream_go<F, NT, U, OPT, false, N>(d, b, s, tiles, threads);
}

/* One launch of the streaming kernel over T <= 16 X rows: tiles of NT <= 4 rows, as even as they
 * go. MULTI: NT > 1 is built (else T must be 1). XS: X in shared memory where it fits. */
template <int F, int U, int OPT, bool MULTI, bool XS, int N>
void stream_launch_n(CudaDevice *d, const Batch<N> &b, const Shape &s, int threads) {
    const int tiles = (s.T + NT_MAX - 1) / NT_MAX, nt = (s.T + tiles - 1) / tiles;
    if constexpr (MULTI) {
        switch (nt) {
        case 1: stream_go_xs<F, 1, U, OPT, XS, N>(d, b, s, tiles, threads); break;
        case 2: stream_go<F, 2, U, OPT, false, N>(d, b, s, tiles, threads); break;
        case 3: stream_go<F, 3, U, OPT, false, N>(d, b, s, tiles, threads); break;
        default: stream_go<F, 4, U, OPT, false, N>(d, b, s, tiles, threads); break;
        }
    } else {
        stream_go_xs<F, 1, U, OPT, XS, N>(d, b, s, tiles, threads);
    }
}

template <int F, int U, int OPT, bool MULTI, bool XS>
void stream_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, int threads) {
    Shape s{0, 0, heads, n, T};
    if (n == 1) stream_launch_n<F, U, OPT, MULTI, XS, 1>(d, batch_of<1>(jobs, n, &s), s, threads);
    else stream_launch_n<F, U, OPT, MULTI, XS, MAX_BATCH>(d, batch_of<MAX_BATCH>(jobs, n, &s), s, threads);
}

size_t fmt_row_bytes(int fmt, int cols) {
    return fmt == WF_BF16 ? 2 * (size_t)cols : fmt == WF_I8ROW ? (size_t)cols : (size_t)cols / 2;
}

/* Whether the staged kernel can take the jobs: a whole row of every job fits its shared memory. */
bool stageable(const MulJob *jobs, int n) {
    for (int i = 0; i < n; i++)
        if (fmt_row_bytes(jobs[i].w.fmt, jobs[i].w.cols) > SMEM_DEFAULT) return false;
    return true;
}

template <int F, int N> void staged_go(CudaDevice *d, const Batch<N> &b, const Shape &s) {
    /* rows spread over about two blocks per multiprocessor, as many as shared memory holds beside
     * X where X fits (else X is read from device memory) */
    const size_t rb = fmt_row_bytes(F, s.cols), xb = sizeof(float) * (size_t)s.T * (size_t)s.cols;
    const bool xs = rb + xb <= SMEM_DEFAULT;
    const long wanted = 2L * 132;
    int rpb = (int)(((long)s.rows * s.heads * s.n + wanted - 1) / wanted);
    const int fit = (int)((SMEM_DEFAULT - (xs ? xb : 0)) / rb);
    rpb = rpb < 1 ? 1 : rpb > fit ? fit : rpb;
    const dim3 grid((unsigned)((s.rows + rpb - 1) / rpb), (unsigned)s.heads, (unsigned)s.n);
    if (xs) staged_kernel<F, true, N><<<grid, STAGED_THREADS, (size_t)rpb * rb + xb, d->stream>>>(b, s.T, rpb);
    else staged_kernel<F, false, N><<<grid, STAGED_THREADS, (size_t)rpb * rb, d->stream>>>(b, s.T, rpb);
}

void staged_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    Shape s{0, 0, heads, n, T};
    const int f = jobs[0].w.fmt;
    if (n == 1) {
        const Batch<1> b = batch_of<1>(jobs, n, &s);
        if (f == WF_BF16) staged_go<WF_BF16, 1>(d, b, s);
        else if (f == WF_I8ROW) staged_go<WF_I8ROW, 1>(d, b, s);
        else staged_go<WF_MXFP4, 1>(d, b, s);
    } else {
        const Batch<MAX_BATCH> b = batch_of<MAX_BATCH>(jobs, n, &s);
        if (f == WF_BF16) staged_go<WF_BF16, MAX_BATCH>(d, b, s);
        else if (f == WF_I8ROW) staged_go<WF_I8ROW, MAX_BATCH>(d, b, s);
        else staged_go<WF_MXFP4, MAX_BATCH>(d, b, s);
    }
}

/* Whether jobs fit the coop kernel: streamable, one head, rows of whole segments, X (in shared
 * memory) no more than COOP_COLS columns. */
constexpr int COOP_COLS = 16384;

bool coopable(const MulJob *jobs, int n, int heads) {
    if (heads != 1 || !streamable(jobs, n, heads)) return false;
    for (int i = 0; i < n; i++)
        if (fmt_row_bytes(jobs[i].w.fmt, jobs[i].w.cols) % COOP_ALIGN || jobs[i].w.cols > COOP_COLS) return false;
    return true;
}

/* Shared memory of a coop block: X (XS), then each warp's stages. */
template <int F, bool XS, int ST, int G, int W> size_t coop_smem(int cols) {
    return (XS ? sizeof(float) * (size_t)cols : 0) + (size_t)W * ST * (32 / Fmt<F>::TPR) * coop_pitch<F, G>();
}

template <int F, int NT, bool XS, int ST, int G, int W, int N> void coop_go(CudaDevice *d, const Batch<N> &b, const Shape &s) {
    const int rows_block = 32 / Fmt<F>::TPR * W;
    const size_t smem = coop_smem<F, XS, ST, G, W>(s.cols);
    static size_t granted = SMEM_DEFAULT; /* shared memory asked of the driver for this kernel (under d->mu) */
    if (!smem_granted(d, coop_kernel<F, NT, XS, ST, G, W, N>, smem, &granted)) return;
    const dim3 grid((unsigned)((s.rows + rows_block - 1) / rows_block), 1, (unsigned)s.n);
    coop_kernel<F, NT, XS, ST, G, W, N><<<grid, 32 * W, smem, d->stream>>>(b, s.T);
}

template <int F, int NT, bool XS, int ST, int G, int W> void coop_launch_nt(CudaDevice *d, const MulJob *jobs, int n, int T) {
    Shape s{0, 0, 1, n, T};
    if (n == 1) coop_go<F, NT, XS, ST, G, W, 1>(d, batch_of<1>(jobs, n, &s), s);
    else coop_go<F, NT, XS, ST, G, W, MAX_BATCH>(d, batch_of<MAX_BATCH>(jobs, n, &s), s);
}

/* Tiles of X rows a coop launch takes at most: BF16 threads hold 8 lanes, the others 16. */
constexpr int COOP_NT_BF16 = 8, COOP_NT = 4;

typedef void (*VariantFn)(CudaDevice *d, const MulJob *jobs, int n, int heads, int T);

/* fn over X rows [0, T) in launches of at most `most` rows (one launch, the jobs as given, when T
 * is within it). */
void chunked(CudaDevice *d, VariantFn fn, const MulJob *jobs, int n, int heads, int T, int most = T_MAX) {
    if (T <= most) return fn(d, jobs, n, heads, T);
    MulJob part[MAX_BATCH];
    for (int t0 = 0; t0 < T; t0 += most) {
        for (int i = 0; i < n; i++) {
            part[i] = jobs[i];
            part[i].X = jobs[i].X + (size_t)t0 * jobs[i].sp.x_t;
            part[i].Y = jobs[i].Y + (size_t)t0 * jobs[i].sp.y_t;
        }
        fn(d, part, n, heads, T - t0 < most ? T - t0 : most);
    }
}

/* One coop launch over T <= its tile of X rows (T = 1: X in shared memory; MULTI: T > 1 built). */
template <int F, int ST, int G, int W, bool MULTI> void coop_launch_f(CudaDevice *d, const MulJob *jobs, int n, int T) {
    if (T == 1) return coop_launch_nt<F, 1, true, ST, G, W>(d, jobs, n, 1);
    if constexpr (MULTI) {
        if (T == 2) coop_launch_nt<F, 2, false, ST, G, W>(d, jobs, n, T);
        else if (T <= 4) coop_launch_nt<F, 4, false, ST, G, W>(d, jobs, n, T);
        else if constexpr (F == WF_BF16) coop_launch_nt<F, COOP_NT_BF16, false, ST, G, W>(d, jobs, n, T);
    } else {
        check(d, cudaErrorInvalidValue, "coop kernel launched on several X rows (built for one)");
    }
}

/* One coop launch over T <= a tile of X rows, by format. */
template <int ST, int G, int W, bool MULTI> void coop_tile(CudaDevice *d, const MulJob *jobs, int n, int, int T) {
    const int f = jobs[0].w.fmt;
    if (f == WF_MXFP4) coop_launch_f<WF_MXFP4, ST, G, W, MULTI>(d, jobs, n, T);
    else if (f == WF_BF16) coop_launch_f<WF_BF16, ST, G, W, MULTI>(d, jobs, n, T);
    else coop_launch_f<WF_I8ROW, ST, G, W, MULTI>(d, jobs, n, T);
}

/* The coop kernel on coopable jobs over T X rows (T = 1 unless MULTI), in launches of a tile each. */
template <int ST, int G, int W, bool MULTI = false> void coop_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    chunked(d, coop_tile<ST, G, W, MULTI>, jobs, n, heads, T, jobs[0].w.fmt == WF_BF16 ? COOP_NT_BF16 : COOP_NT);
}

/* Shared memory of a coop tile block: ST stages of X, then each warp's stages. */
template <int F, int NT, int ST, int G, int W> constexpr size_t coop_tile_smem() {
    return sizeof(float) * ST * NT * segment_cols<F, G>() + (size_t)W * ST * WarpCopies<F, G>::STAGE;
}

template <int F, int NT, int ST, int G, int W, int N> void coop_tile_go(CudaDevice *d, const Batch<N> &b, const Shape &s) {
    constexpr size_t smem = coop_tile_smem<F, NT, ST, G, W>();
    static size_t granted = SMEM_DEFAULT;
    if (!smem_granted(d, coop_tile_kernel<F, NT, ST, G, W, N>, smem, &granted)) return;
    const int rows_block = 32 / Fmt<F>::TPR * W;
    const dim3 grid((unsigned)((s.rows + rows_block - 1) / rows_block), 1, (unsigned)s.n);
    coop_tile_kernel<F, NT, ST, G, W, N><<<grid, 32 * W, smem, d->stream>>>(b, s.T);
}

template <int F, int NT, int ST, int G, int W> void coop_tile_nt(CudaDevice *d, const MulJob *jobs, int n, int T) {
    Shape s{0, 0, 1, n, T};
    if (n == 1) coop_tile_go<F, NT, ST, G, W, 1>(d, batch_of<1>(jobs, n, &s), s);
    else coop_tile_go<F, NT, ST, G, W, MAX_BATCH>(d, batch_of<MAX_BATCH>(jobs, n, &s), s);
}

/* One coop tile launch over 2 <= T <= a tile of X rows, by format (tiles of 2, 4 and, for BF16, 8). */
template <int ST, int G, int W> void coop_tile_one(CudaDevice *d, const MulJob *jobs, int n, int, int T) {
    const int f = jobs[0].w.fmt;
    if (f == WF_MXFP4) {
        if (T <= 2) coop_tile_nt<WF_MXFP4, 2, ST, G, W>(d, jobs, n, T);
        else coop_tile_nt<WF_MXFP4, COOP_NT, ST, G, W>(d, jobs, n, T);
    } else if (f == WF_BF16) {
        if (T <= 2) coop_tile_nt<WF_BF16, 2, ST, G, W>(d, jobs, n, T);
        else if (T <= 4) coop_tile_nt<WF_BF16, 4, ST, G, W>(d, jobs, n, T);
        else coop_tile_nt<WF_BF16, COOP_NT_BF16, ST, G, W>(d, jobs, n, T);
    } else {
        if (T <= 2) coop_tile_nt<WF_I8ROW, 2, ST, G, W>(d, jobs, n, T);
        else coop_tile_nt<WF_I8ROW, COOP_NT, ST, G, W>(d, jobs, n, T);
    }
}

/* The coop tile kernel on coopable jobs over T X rows (T = 1: the coop kernel), a launch a tile. */
template <int ST, int G, int W> void coop_tile_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    if (T == 1) return coop_launch<ST, G, W>(d, jobs, n, heads, T);
    chunked(d, coop_tile_one<ST, G, W>, jobs, n, heads, T, jobs[0].w.fmt == WF_BF16 ? COOP_NT_BF16 : COOP_NT);
}

/* The generic kernel, as launched before the streaming kernel existed. */
template <int TILE_T, int N> void generic_go(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    Shape s{0, 0, heads, n, T};
    const Batch<N> b = batch_of<N>(jobs, n, &s);
    const dim3 grid((unsigned)((s.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), (unsigned)heads, (unsigned)n);
    matmul_kernel<TILE_T, N><<<grid, THREADS, 0, d->stream>>>(b, T);
}

void generic_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    if (n == 1) {
        if (T == 1) generic_go<1, 1>(d, jobs, n, heads, T);
        else generic_go<4, 1>(d, jobs, n, heads, T);
    } else if (n <= 16) generic_go<1, 16>(d, jobs, n, heads, T);
    else generic_go<1, MAX_BATCH>(d, jobs, n, heads, T);
}

template <int OPT, int N> void gemv_bf16_go(CudaDevice *d, const MulJob *jobs, int n) {
    Shape s{0, 0, 1, n, 1};
    const Batch<N> b = batch_of<N>(jobs, n, &s);
    const int rpb = GV_THREADS / GV_TPR;
    gemv_bf16_kernel<OPT, N><<<dim3((unsigned)((s.rows + rpb - 1) / rpb), 1, (unsigned)n), GV_THREADS, 0, d->stream>>>(b);
}

/* The BF16 decode kernel (T = 1, one head, streamable BF16 jobs). */
template <int OPT> void gemv_bf16_launch(CudaDevice *d, const MulJob *jobs, int n, int, int) {
    if (n == 1) gemv_bf16_go<OPT, 1>(d, jobs, n);
    else gemv_bf16_go<OPT, MAX_BATCH>(d, jobs, n);
}

/* ---- the choice, and the variants bench_device compares ------------------------------------ */

/* The kernel for products the streaming and staged kernels can take, as measured on an H200
 * (bench_device, docs/PERFORMANCE.md "Kernel rates"): few output rows (all jobs and heads) take
 * the staged kernel; one X row the coop kernel where it takes the jobs (MXFP4, I8ROW, BF16 above
 * COOP_ROWS rows: segments of 256 bytes in blocks of 4 warps, or 128 bytes four stages deep in
 * blocks of 2 above COOP_ROWS_WIDE); more X rows the coop tile kernel where it takes the jobs
 * (MXFP4 in blocks of 4 warps two stages deep, BF16 and I8ROW above COOP_ROWS rows of 2 warps four
 * deep: 16 MXFP4 experts, gate and up, T = 2 / 16 in 93 / 554 us against the streaming kernel's 179
 * and the coop kernel's X-through-cache tiles' 1370; BF16 12288 x 7168 T = 16 in 186 against the
 * staged kernel's 601), BF16 and I8ROW up to COOP_ROWS rows the staged kernel (the tiles' blocks
 * are too few to fill the GPU: BF16 1536 x 7168 T = 4 in 24 against 52 us); other BF16 and I8ROW
 * with more than STAGED_T rows of X the staged kernel (compute-bound there, and it reads X from
 * shared memory); other BF16 decode the decode kernel (asking L2 for 256-byte reads up to ROWS_HINT
 * rows); everything else the streaming kernel, X in shared memory when T = 1. The coop kernel's own
 * tiles (X through the read-only cache) stay a variant bench_device measures against. */
constexpr long STAGED_ROWS = 1024, ROWS_HINT = 16384, COOP_ROWS = 2048, COOP_ROWS_WIDE = 16384;
constexpr int STAGED_T = 12;

void auto_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    long rows = 0;
    for (int i = 0; i < n; i++) rows += (long)jobs[i].sp.n * heads;
    const int f = jobs[0].w.fmt;
    if (rows <= STAGED_ROWS && stageable(jobs, n)) return staged_launch(d, jobs, n, heads, T);
    if (T == 1 && coopable(jobs, n, heads)) { /* decode: the coop kernel, shaped as measured */
        if (f == WF_MXFP4) return coop_launch<2, 128, 4>(d, jobs, n, heads, T);
        if (f == WF_I8ROW) return coop_launch<2, 256, 4>(d, jobs, n, heads, T);
        if (rows > COOP_ROWS_WIDE) return coop_launch<4, 128, 2>(d, jobs, n, heads, T);
        if (rows > COOP_ROWS) return coop_launch<2, 256, 4>(d, jobs, n, heads, T);
    }
    if (T > 1 && coopable(jobs, n, heads)) { /* prefill chunks and verify passes: X staged beside the weights */
        if (f == WF_MXFP4) return coop_tile_launch<2, 128, 4>(d, jobs, n, heads, T);
        if (rows > COOP_ROWS) return coop_tile_launch<4, 128, 2>(d, jobs, n, heads, T);
        if (stageable(jobs, n)) return staged_launch(d, jobs, n, heads, T); /* too few blocks for the tiles */
    }
    if (f == WF_MXFP4) {
        if (T == 1) stream_launch<WF_MXFP4, 2, 0, false, true>(d, jobs, n, heads, T, 128);
        else stream_launch<WF_MXFP4, 2, OPT_HINT, true, false>(d, jobs, n, heads, T, 128);
    } else if (T > STAGED_T && stageable(jobs, n)) {
        staged_launch(d, jobs, n, heads, T);
    } else if (f == WF_I8ROW) {
        stream_launch<WF_I8ROW, 4, OPT_HINT, true, true>(d, jobs, n, heads, T, 128);
    } else if (T == 1 && heads == 1) {
        if (rows <= ROWS_HINT) gemv_bf16_launch<OPT_HINT>(d, jobs, n, heads, T);
        else gemv_bf16_launch<0>(d, jobs, n, heads, T);
    } else if (T == 1) {
        stream_launch<WF_BF16, 8, OPT_HINT, false, true>(d, jobs, n, heads, T, 128);
    } else {
        stream_launch<WF_BF16, 4, OPT_HINT, true, false>(d, jobs, n, heads, T, 64);
    }
}

/* The product kernels' choice for any jobs (launch_products without tmul). */
void choose_launch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    if (streamable(jobs, n, heads)) chunked(d, auto_launch, jobs, n, heads, T);
    else generic_launch(d, jobs, n, heads, T);
}

struct Variant {
    const char *name;
    int fmt;     /* the weight format it takes; -1: any */
    bool multi;  /* T > 1 too */
    bool stream; /* needs streamable jobs, runs T_MAX rows at a time */
    bool one;    /* one head only */
    VariantFn fn;
    bool coop = false; /* needs jobs the coop kernel takes */
};

template <int F, int U, int OPT, bool MULTI, bool XS, int TH>
void v_stream(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    stream_launch<F, U, OPT, MULTI, XS>(d, jobs, n, heads, T, TH);
}

/* "auto" is launch_products' choice; "generic" the kernel it falls back on (and which every
 * product took before the others existed); the rest, the kernels auto chooses from, and the
 * alternatives measured against them. */
const Variant variants[] = {
    {"auto", -1, true, false, false, choose_launch},
    {"generic", -1, true, false, false, generic_launch},
    {"staged", -1, true, true, false, staged_launch},
    {"bf16 decode", WF_BF16, false, true, true, gemv_bf16_launch<0>},
    {"bf16 decode hint", WF_BF16, false, true, true, gemv_bf16_launch<OPT_HINT>},
    {"bf16 U8 hint xs", WF_BF16, false, true, false, v_stream<WF_BF16, 8, OPT_HINT, false, true, 128>},
    {"bf16 U4 hint x64", WF_BF16, true, true, false, v_stream<WF_BF16, 4, OPT_HINT, true, false, 64>},
    {"i8 U4 hint xs", WF_I8ROW, true, true, false, v_stream<WF_I8ROW, 4, OPT_HINT, true, true, 128>},
    {"mx U2 xs", WF_MXFP4, false, true, false, v_stream<WF_MXFP4, 2, 0, false, true, 128>},
    {"mx U2 hint", WF_MXFP4, true, true, false, v_stream<WF_MXFP4, 2, OPT_HINT, true, false, 128>},
    {"coop W4 S2 G128", -1, true, true, true, coop_launch<2, 128, 4, true>, true},
    {"coop W4 S2 G256", -1, false, true, true, coop_launch<2, 256, 4>, true},
    {"coop W2 S4 G128", -1, false, true, true, coop_launch<4, 128, 2>, true},
    {"coop tile W4 S2 G128", -1, true, true, true, coop_tile_launch<2, 128, 4>, true},
    {"coop tile W2 S4 G128", -1, true, true, true, coop_tile_launch<4, 128, 2>, true},
};
constexpr int N_VARIANTS = (int)(sizeof variants / sizeof variants[0]);

bool variant_applies(const Variant &v, const MulJob *jobs, int n, int heads, int T) {
    if (v.coop && !coopable(jobs, n, heads)) return false;
    if (v.fmt >= 0 && v.fmt != jobs[0].w.fmt) return false;
    if ((!v.multi && T > 1) || (v.one && heads > 1)) return false;
    if (v.fn == staged_launch && !stageable(jobs, n)) return false;
    return !v.stream || streamable(jobs, n, heads);
}

void run_variant(CudaDevice *d, const Variant &v, const MulJob *jobs, int n, int heads, int T) {
    if (v.stream) chunked(d, v.fn, jobs, n, heads, T);
    else v.fn(d, jobs, n, heads, T);
}

} // namespace

void launch_products(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, bool tmul) {
    if (tmul) {
        const dim3 grid((unsigned)((jobs[0].w.cols + 127) / 128), (unsigned)heads, (unsigned)T);
        tmul_kernel<<<grid, 128, 0, d->stream>>>(jobs[0].w, jobs[0].sp, jobs[0].X, jobs[0].Y);
    } else {
        choose_launch(d, jobs, n, heads, T);
    }
    check(d, cudaGetLastError(), "matmul kernel launch");
}

} // namespace dfcuda

using namespace dfcuda;

extern "C" const char *cuda_variant_name(int v) { return v >= 0 && v < N_VARIANTS ? variants[v].name : nullptr; }

namespace {

/* A timing's device buffers and events, released however it ends. */
struct Timing {
    float *x = nullptr, *y = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    double *rounds = nullptr;
    ~Timing() {
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        cudaFree(x), cudaFree(y);
        cudaGetLastError();
        free(rounds);
    }
};

/* Variant v over jobs (X at tm.x, outputs at tm.y): the checked run's outputs to Y, then rounds of
 * reps launches; *secs the median round's time per launch. 0, or -1 with a message. */
int time_jobs(CudaDevice *d, const Variant &v, const MulJob *jobs, int n, int T, Timing &tm, const float *X, size_t xb,
              float *Y, size_t yb, int reps, int rounds, double *secs) {
    bool ok = cudaMemcpyAsync(tm.x, X, xb, cudaMemcpyHostToDevice, d->stream) == cudaSuccess &&
              cudaMemsetAsync(tm.y, 0xFF, yb, d->stream) == cudaSuccess; /* NaN: an output never written shows */
    if (ok) run_variant(d, v, jobs, n, 1, T);
    ok = ok && cudaGetLastError() == cudaSuccess &&
         cudaMemcpyAsync(Y, tm.y, yb, cudaMemcpyDeviceToHost, d->stream) == cudaSuccess;
    /* one untimed round first: a shape's first variant has read up to 1.9x slow in its rounds */
    for (int i = 0; i < reps && ok; i++) run_variant(d, v, jobs, n, 1, T);
    for (int k = 0; k < rounds && ok; k++) {
        ok = cudaEventRecord(tm.e0, d->stream) == cudaSuccess;
        for (int i = 0; i < reps && ok; i++) run_variant(d, v, jobs, n, 1, T);
        float ms = 0;
        ok = ok && cudaEventRecord(tm.e1, d->stream) == cudaSuccess && cudaEventSynchronize(tm.e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, tm.e0, tm.e1) == cudaSuccess && cudaGetLastError() == cudaSuccess;
        tm.rounds[k] = ms / 1e3 / reps;
    }
    if (!ok || cudaStreamSynchronize(d->stream) != cudaSuccess) return df_fail("cuda_time_variant: %s failed", v.name);
    for (int a = 1; a < rounds; a++) /* the median round */
        for (int b = a; b > 0 && tm.rounds[b - 1] > tm.rounds[b]; b--) {
            const double t = tm.rounds[b];
            tm.rounds[b] = tm.rounds[b - 1], tm.rounds[b - 1] = t;
        }
    *secs = tm.rounds[rounds / 2];
    return 0;
}

} // namespace

extern "C" int cuda_time_variant(MatDevice *base, int v, const Mat *const *W, int n, const float *X, int T, int reps,
                                 int rounds, float *Y, double *secs) {
    CudaDevice *d = (CudaDevice *)base;
    if (v < 0 || v >= N_VARIANTS || n < 1 || n > MAX_BATCH || T < 1 || reps < 1 || rounds < 1)
        return df_fail("cuda_time_variant: bad arguments");
    const int rows = W[0]->rows, cols = W[0]->cols;
    for (int i = 1; i < n; i++)
        if (W[i]->rows != rows || W[i]->cols != cols || W[i]->fmt != W[0]->fmt)
            return df_fail("cuda_time_variant: the jobs' shapes differ");
    const size_t xb = sizeof(float) * (size_t)T * cols, yb = sizeof(float) * (size_t)T * rows;
    Timing tm;
    tm.rounds = (double *)df_malloc(sizeof(double) * (size_t)rounds);
    pthread_mutex_lock(&d->mu);
    int rc = 0;
    if (cudaMalloc(&tm.x, xb) != cudaSuccess || cudaMalloc(&tm.y, yb * n) != cudaSuccess ||
        cudaEventCreate(&tm.e0) != cudaSuccess || cudaEventCreate(&tm.e1) != cudaSuccess)
        rc = df_fail("cuda_time_variant: no room on the GPU");
    MulJob jobs[MAX_BATCH];
    for (int i = 0; i < n && !rc; i++) {
        const uint8_t *dw = kept_weights(d, W[i]);
        if (!dw) rc = df_fail("cuda_time_variant: the weights do not stay on the GPU");
        jobs[i] = MulJob{dev_mat(W[i], dw), Span{0, 0, rows, (size_t)cols, 0, (size_t)rows}, tm.x, tm.y + (size_t)i * T * rows};
    }
    if (!rc && !variant_applies(variants[v], jobs, n, 1, T)) rc = 1;
    if (!rc) rc = time_jobs(d, variants[v], jobs, n, T, tm, X, xb, Y, yb * n, reps, rounds, secs);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

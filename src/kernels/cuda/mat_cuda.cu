/* mat_cuda.cu - the CUDA device (device.h): matrix products on GPU 0 in the CPU kernels' order.
 *
 * One output y[t][r] is computed by 16 consecutive threads (a half warp): lane l accumulates
 * columns l, l+16, l+32, ... of the row, zero-padded to a multiple of 16, with one fused
 * multiply-add each from +0, and the lanes are summed by the fixed tree of kernels_impl.h (8, 4,
 * 2, 1 apart). Weights are expanded exactly as on the CPU (BF16 by a shift, I8ROW by one fp32
 * product, MXFP4 as E2M1 times a power of two), with no contraction or reassociation (explicit
 * __fmaf_rn/__fmul_rn/__fadd_rn, built with --fmad=false), so every output is bit-identical to
 * the CPU kernels'. A half warp walks its weight row once per tile of X rows (1 when decoding, 4
 * otherwise), loading 8 weights ahead of their multiply-adds so that enough reads are in flight.
 * Decode products (one X row, one head) of BF16 and MXFP4 weights take wide-load kernels instead
 * (gemv_bf16_kernel, gemv_mxfp4_kernel): each thread holds several of the 16 lanes and walks their
 * columns in the same order, so they give the same bits.
 * The per-head products (mat_mul_heads) run the same kernel over each head's block of rows; the
 * transposed one (mat_tmul_heads) gives each output one thread that adds the products of its
 * column in row order, as the CPU does.
 *
 * Weights are copied to device memory at first use and stay there under their residency key
 * (mat.h) while the memory budget lasts, experts leaving room for the spine. A key seen again with
 * a new generation (a streamed spine layer read again, an expert slot refilled) means new bytes:
 * the copy is refreshed in place. Past the budget, and for matrices without a key, the bytes are
 * copied for the one product, and where even that does not fit, the product runs on the CPU. The
 * buffers a store refills (the expert cache, the spine's stream buffers) are page-locked for fast
 * copies when the driver allows. Activations go up and results come back on every call, on one
 * stream, under a mutex (products may be called from any thread). While the model runs an expert
 * cache (slots_cuda.cu), the slots' contents are entered here under the keys they were filled from,
 * so products find them too; such entries point into the slots and are dropped, never refreshed,
 * when their key comes back with another generation. */
#include "kernels/cuda/mat_cuda.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_dev.h"
#include "util/err.h"

namespace dfcuda {

constexpr int LANES = 16, ROWS_PER_BLOCK = 8, THREADS = LANES * ROWS_PER_BLOCK, UNROLL = 8;
constexpr size_t RESERVE = 2ull << 30; /* device memory left for scratch and the runtime */

__constant__ float c_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* 2^(s-127) for s = 1..254; 0 is 2^-127 (subnormal) and 255 NaN, as kern_e8m0_table. */
__device__ __forceinline__ float e8m0(uint8_t s) {
    return __uint_as_float(s == 0 ? 0x00400000u : s == 255 ? 0x7fc00000u : (uint32_t)s << 23);
}

/* Weight (r, c), c < cols, expanded exactly to fp32. */
__device__ __forceinline__ float expand(const DevMat &w, int r, int c) {
    const size_t at = (size_t)r * (size_t)w.cols + (size_t)c;
    switch (w.fmt) {
    case WF_BF16: return __uint_as_float((uint32_t)((const uint16_t *)w.data)[at] << 16);
    case WF_F32: return ((const float *)w.data)[at];
    case WF_I8ROW: return __fmul_rn((float)((const int8_t *)w.data)[at], ((const float *)w.aux)[r]);
    default: {
        uint8_t byte = ((const uint8_t *)w.data)[at / 2];
        uint8_t code = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
        return __fmul_rn(c_e2m1[code], e8m0(((const uint8_t *)w.aux)[at / 32]));
    }
    }
}

/* acc[k] += w * x[t0 + k][c] for the tile's X rows (x_t floats apart), in the lane's order. */
template <int TILE_T>
__device__ __forceinline__ void fma_tile(float *acc, float wv, const float *__restrict__ X, size_t x_t, int t0, int nt,
                                         int c, bool in) {
#pragma unroll
    for (int k = 0; k < TILE_T; k++)
        if (k < nt) acc[k] = __fmaf_rn(wv, in ? X[(size_t)(t0 + k) * x_t + c] : 0.0f, acc[k]);
}

/* TILE_T: X rows per walk of the weight row: 1 for decode, 4 otherwise (8 was measured slower on
 * an H200: 686 against 533 us for 12288 x 7168 at T = 8). */
template <int N> struct Batch {
    MulJob j[N];
};

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
        /* UNROLL weights loaded before their multiply-adds, which still run in column order:
         * the loads overlap, the lane's chain is unchanged */
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


/* Decode products (T = 1, one head) with wide loads, in the same order. BF16: four threads per row,
 * each loading 8 bytes (4 consecutive columns) per 16-column group: thread t holds lanes 4t..4t+3
 * of kernels_impl.h, each lane's columns in order; the four then add the lanes by the same fixed
 * tree. Needs cols a multiple of 16 and 16-byte aligned rows and X. */
/* Blocks of one warp (8 rows): measured on an H200, a 12288 x 7168 product took 63 us in blocks of
 * 32 threads against 127 us in blocks of 64, 128 or 256 (bench_device built with the DF_GV_*
 * overrides, one run). */
#ifndef DF_GV_BF16_THREADS
#define DF_GV_BF16_THREADS 32
#endif
#ifndef DF_GV_MX_THREADS
#define DF_GV_MX_THREADS 256
#endif
#ifndef DF_GV_UNROLL
#define DF_GV_UNROLL 16
#endif
constexpr int GV_THREADS = DF_GV_MX_THREADS, BF_THREADS = DF_GV_BF16_THREADS, GV_UNROLL = DF_GV_UNROLL, BF_TPR = 4;

__device__ __forceinline__ void lanes_tree_store(const float *l, float *y) {
    float s8[8], s4[4];
#pragma unroll
    for (int i = 0; i < 8; i++) s8[i] = __fadd_rn(l[i], l[i + 8]);
#pragma unroll
    for (int i = 0; i < 4; i++) s4[i] = __fadd_rn(s8[i], s8[i + 4]);
    *y = __fadd_rn(__fadd_rn(s4[0], s4[2]), __fadd_rn(s4[1], s4[3]));
}

__device__ __forceinline__ void fma_bf16x4(float *acc, uint2 w, float4 x) {
    acc[0] = __fmaf_rn(__uint_as_float(w.x << 16), x.x, acc[0]);
    acc[1] = __fmaf_rn(__uint_as_float(w.x & 0xFFFF0000u), x.y, acc[1]);
    acc[2] = __fmaf_rn(__uint_as_float(w.y << 16), x.z, acc[2]);
    acc[3] = __fmaf_rn(__uint_as_float(w.y & 0xFFFF0000u), x.w, acc[3]);
}

template <int N> __global__ void __launch_bounds__(BF_THREADS) gemv_bf16_kernel(Batch<N> b) {
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const int t = threadIdx.x & (BF_TPR - 1), r = blockIdx.x * (BF_THREADS / BF_TPR) + (int)(threadIdx.x / BF_TPR);
    const bool valid = r < job.sp.n;
    const int cols = job.w.cols, groups = valid ? cols / 16 : 0;
    const uint2 *__restrict__ wrow = (const uint2 *)((const uint16_t *)job.w.data + (size_t)(valid ? r : 0) * cols) + t;
    const float4 *__restrict__ x = (const float4 *)job.X + t;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int g = 0;
    for (; g + GV_UNROLL <= groups; g += GV_UNROLL) {
        uint2 wv[GV_UNROLL];
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++) wv[u] = __ldcs(wrow + 4 * (g + u));
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++) fma_bf16x4(acc, wv[u], __ldg(x + 4 * (g + u)));
    }
    for (; g < groups; g++) fma_bf16x4(acc, __ldcs(wrow + 4 * g), __ldg(x + 4 * g));
    /* lanes 8-15 (threads 2, 3) onto lanes 0-7, then lanes 4-7 (thread 1) onto 0-3: the tree's
     * first two levels; the last two in thread 0 */
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = __fadd_rn(acc[i], __shfl_xor_sync(0xFFFFFFFFu, acc[i], 2));
#pragma unroll
    for (int i = 0; i < 4; i++) s[i] = __fadd_rn(s[i], __shfl_xor_sync(0xFFFFFFFFu, s[i], 1));
    if (valid && t == 0) job.Y[r] = __fadd_rn(__fadd_rn(s[0], s[2]), __fadd_rn(s[1], s[3]));
}

/* MXFP4: two threads per row, as for BF16 (lanes 0-7 and 8-15). Per 64 columns the pair loads 32
 * contiguous bytes, 16 each (32 columns under one scale); each 4-byte word holds 8 columns of one
 * half of the lanes, so the pair swaps two words and each thread then walks its lanes' columns in
 * order. X is staged in shared memory, and the E2M1 table (16 entries in 16 banks: no conflicts).
 * Needs cols a multiple of 64, at most GV_MX_COLS, and 16-byte aligned rows. */
constexpr int GV_MX_COLS = 8192, GV_MX_UNROLL = 4;

template <int N> __global__ void __launch_bounds__(GV_THREADS) gemv_mxfp4_kernel(Batch<N> b) {
    extern __shared__ float xs[];
    __shared__ float lut[16];
    const MulJob &job = b.j[N == 1 ? 0 : blockIdx.z];
    const int cols = job.w.cols;
    if (threadIdx.x < 16) lut[threadIdx.x] = c_e2m1[threadIdx.x];
    for (int c = threadIdx.x; c < cols; c += GV_THREADS) xs[c] = job.X[c];
    __syncthreads();
    const int p = threadIdx.x & 1, r = blockIdx.x * (GV_THREADS / 2) + (int)(threadIdx.x >> 1);
    const bool valid = r < job.sp.n;
    const int steps = cols / 64; /* the same for every lane (a row past the end reads row 0): the swaps need all 32 */
    const uint4 *__restrict__ wrow = (const uint4 *)((const uint8_t *)job.w.data + (size_t)(valid ? r : 0) * (size_t)(cols / 2)) + p;
    const uint16_t *__restrict__ srow = (const uint16_t *)((const uint8_t *)job.w.aux + (size_t)(valid ? r : 0) * (size_t)(cols / 32));
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
    for (int g0 = 0; g0 < steps; g0 += GV_MX_UNROLL) {
        uint4 wv[GV_MX_UNROLL];
        uint32_t sc2[GV_MX_UNROLL];
#pragma unroll
        for (int u = 0; u < GV_MX_UNROLL; u++)
            if (g0 + u < steps) wv[u] = __ldcs(wrow + 2 * (g0 + u)), sc2[u] = srow[g0 + u];
#pragma unroll
        for (int u = 0; u < GV_MX_UNROLL; u++) {
            if (g0 + u >= steps) break;
            const uint32_t s0 = p ? wv[u].x : wv[u].y, s1 = p ? wv[u].z : wv[u].w;
            const uint32_t r0 = __shfl_xor_sync(0xFFFFFFFFu, s0, 1), r1 = __shfl_xor_sync(0xFFFFFFFFu, s1, 1);
            const uint32_t wd[4] = {p ? r0 : wv[u].x, p ? r1 : wv[u].z, p ? wv[u].y : r0, p ? wv[u].w : r1};
            const float sc[2] = {e8m0((uint8_t)(sc2[u] & 255u)), e8m0((uint8_t)(sc2[u] >> 8))};
            const float *x = xs + 64 * (g0 + u) + 8 * p;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    const float wt = __fmul_rn(lut[(wd[j] >> (4 * n)) & 15u], sc[j >> 1]);
                    acc[n] = __fmaf_rn(wt, x[16 * j + n], acc[n]);
                }
        }
    }
    float l[16];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float other = __shfl_xor_sync(0xFFFFFFFFu, acc[i], 1);
        l[i] = p ? other : acc[i], l[i + 8] = p ? acc[i] : other;
    }
    if (valid && p == 0) lanes_tree_store(l, job.Y + r);
}
} // namespace

namespace dfcuda {

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Which wide-load decode kernel takes a job (T = 1, one head): 1 BF16, 2 MXFP4, 0 neither. */
int gemv_kind(const MulJob &j) {
    if (!aligned16(j.w.data) || !aligned16(j.X)) return 0;
    if (j.w.fmt == WF_BF16 && j.w.cols % 16 == 0) return 1;
    if (j.w.fmt == WF_MXFP4 && j.w.cols % 64 == 0 && j.w.cols <= GV_MX_COLS && ((uintptr_t)j.w.aux & 1) == 0) return 2;
    return 0;
}

template <int N> void launch_gemv(CudaDevice *d, const MulJob *jobs, int n, int kind) {
    Batch<N> b;
    int rows = 0, cols = 0;
    for (int i = 0; i < n; i++) {
        b.j[i] = jobs[i];
        rows = jobs[i].sp.n > rows ? jobs[i].sp.n : rows, cols = jobs[i].w.cols > cols ? jobs[i].w.cols : cols;
    }
    if (kind == 1) {
        const dim3 grid((unsigned)((rows + BF_THREADS / BF_TPR - 1) / (BF_THREADS / BF_TPR)), 1, (unsigned)n);
        gemv_bf16_kernel<N><<<grid, BF_THREADS, 0, d->stream>>>(b);
    } else {
        const dim3 grid((unsigned)((rows + GV_THREADS / 2 - 1) / (GV_THREADS / 2)), 1, (unsigned)n);
        gemv_mxfp4_kernel<N><<<grid, GV_THREADS, sizeof(float) * (size_t)cols, d->stream>>>(b);
    }
}

template <int TILE_T, int N> void launch_batch(CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    Batch<N> b;
    int rows = 0;
    for (int i = 0; i < n; i++) b.j[i] = jobs[i], rows = jobs[i].sp.n > rows ? jobs[i].sp.n : rows;
    const dim3 grid((unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), (unsigned)heads, (unsigned)n);
    matmul_kernel<TILE_T, N><<<grid, THREADS, 0, d->stream>>>(b, T);
}

void launch_products(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, bool tmul) {
    int kind = !tmul && T == 1 && heads == 1 ? gemv_kind(jobs[0]) : 0;
    for (int i = 1; i < n && kind; i++)
        if (gemv_kind(jobs[i]) != kind) kind = 0;
    if (kind) {
        if (n == 1) launch_gemv<1>(d, jobs, n, kind);
        else if (n <= 16) launch_gemv<16>(d, jobs, n, kind);
        else launch_gemv<MAX_BATCH>(d, jobs, n, kind);
    } else if (tmul) {
        const dim3 grid((unsigned)((jobs[0].w.cols + 127) / 128), (unsigned)heads, (unsigned)T);
        tmul_kernel<<<grid, 128, 0, d->stream>>>(jobs[0].w, jobs[0].sp, jobs[0].X, jobs[0].Y);
    } else if (n == 1) {
        if (T == 1) launch_batch<1, 1>(d, jobs, n, heads, T);
        else launch_batch<4, 1>(d, jobs, n, heads, T);
    } else if (n <= 16) launch_batch<1, 16>(d, jobs, n, heads, T);
    else launch_batch<1, MAX_BATCH>(d, jobs, n, heads, T);
    check(d, cudaGetLastError(), "matmul kernel launch");
}

void mat_sizes(const Mat *W, size_t *data, size_t *aux) {
    const size_t n = (size_t)W->rows * (size_t)W->cols;
    switch (W->fmt) {
    case WF_BF16: *data = 2 * n, *aux = 0; break;
    case WF_F32: *data = 4 * n, *aux = 0; break;
    case WF_I8ROW: *data = n, *aux = 4 * (size_t)W->rows; break;
    case WF_MXFP4: *data = n / 2, *aux = n / 32; break;
    }
}

bool check(CudaDevice *d, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    if (!d->faulted)
        snprintf(d->fault_msg, sizeof d->fault_msg, "cuda: %s failed: %s", what, cudaGetErrorString(e));
    d->faulted = true;
    return false;
}

/* Grows a device buffer to at least n bytes (its old content is not kept). Returns false when
 * the device has no room (the buffer is then empty). */
bool reserve(CudaDevice *d, void **buf, size_t *cap, size_t n) {
    if (n <= *cap) return true;
    if (*buf && !check(d, cudaFree(*buf), "cudaFree")) return false;
    *buf = nullptr, *cap = 0;
    if (cudaMalloc(buf, n) != cudaSuccess) {
        cudaGetLastError();
        *buf = nullptr;
        return false;
    }
    *cap = n;
    return true;
}

bool same_item(const MatKey &a, const MatKey &b) { return a.store == b.store && a.part == b.part && a.item == b.item; }

size_t slot_of(const CudaDevice *d, const MatKey &k) {
    uint64_t h = k.item * 0x9E3779B97F4A7C15ull ^ ((uint64_t)k.store << 32 | k.part);
    h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
    return (size_t)h & (d->cap - 1);
}

/* The entry of key's item, or the free entry where it would go. */
Resident *lookup(CudaDevice *d, const MatKey &k) {
    for (size_t i = slot_of(d, k);; i = (i + 1) & (d->cap - 1)) {
        if (!d->table[i].key.store || same_item(d->table[i].key, k)) return &d->table[i];
    }
}

static void grow_table(CudaDevice *d) {
    Resident *old = d->table;
    size_t old_cap = d->cap;
    d->cap = old_cap ? 2 * old_cap : 1024;
    d->table = (Resident *)df_calloc(d->cap, sizeof *d->table);
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key.store) *lookup(d, old[i].key) = old[i];
    free(old);
}

void table_room(CudaDevice *d) {
    if (2 * (d->used + 1) > d->cap) grow_table(d);
}

void copy_weights(CudaDevice *d, cudaStream_t st, uint8_t *dst, const Mat *W) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    check(d, cudaMemcpyAsync(dst, W->data, data, cudaMemcpyHostToDevice, st), "copying weights");
    if (aux) check(d, cudaMemcpyAsync(dst + (data + 15) / 16 * 16, W->aux, aux, cudaMemcpyHostToDevice, st),
                   "copying weight scales");
}

/* W's bytes to dst on the compute stream (settle_uploads waits for them). */
void upload(CudaDevice *d, uint8_t *dst, const Mat *W) {
    d->uploaded = true;
    copy_weights(d, d->stream, dst, W);
}

bool same_shape(const Resident *r, const Mat *W) {
    return r->fmt == (int)W->fmt && r->rows == W->rows && r->cols == W->cols;
}

/* Whether a new copy of W may stay: within the budget, and experts leave room for the spine; while
 * the model runs an expert cache in slots, experts are its to keep. */
bool may_keep(const CudaDevice *d, const Mat *W, size_t bytes) {
    if (d->resident + d->allocated + bytes > d->budget) return false;
    if (W->fmt != WF_MXFP4) return true;
    if (d->slots.n > 0) return false;
    if (d->experts_resident + bytes > d->base.expert_bytes) return false;
    size_t spine_left = d->base.spine_bytes > d->resident - d->experts_resident
                            ? d->base.spine_bytes - (d->resident - d->experts_resident)
                            : 0;
    return d->resident + d->allocated + bytes + spine_left <= d->budget;
}

/* Copies W into a new device allocation that stays, if it may (r filled); false otherwise. */
bool keep_copy(CudaDevice *d, Resident *r, const Mat *W, size_t bytes) {
    void *dev = nullptr;
    if (!may_keep(d, W, bytes) || cudaMalloc(&dev, bytes) != cudaSuccess) {
        cudaGetLastError(); /* a refused allocation: the caller stages it instead */
        return false;
    }
    upload(d, (uint8_t *)dev, W);
    *r = Resident{W->key, (int)W->fmt, W->rows, W->cols, W->fmt == WF_MXFP4, dev, bytes, false, -1};
    d->resident += bytes, d->experts_resident += r->expert ? bytes : 0;
    return true;
}

void drop_copy(CudaDevice *d, Resident *r) {
    if (!r->in_slot) {
        cudaFree(r->dev);
        d->resident -= r->bytes, d->experts_resident -= r->expert ? r->bytes : 0;
    }
    *r = Resident{};
}

/* W copied for this use only, to at (NULL: the single-use buffer). NULL when the device has no
 * room even for that. */
const uint8_t *stage(CudaDevice *d, const Mat *W, size_t bytes, uint8_t *at) {
    if (!at && !reserve(d, (void **)&d->stage, &d->stage_cap, bytes)) return nullptr;
    if (!at) at = d->stage;
    upload(d, at, W);
    d->streamed += bytes;
    return at;
}

/* Removes entry r from the open-addressing table (the entries after it that hash before it move
 * back, so lookups still find them). */
void remove_entry(CudaDevice *d, Resident *r) {
    drop_copy(d, r);
    d->used--;
    size_t hole = (size_t)(r - d->table);
    for (size_t i = (hole + 1) & (d->cap - 1); d->table[i].key.store; i = (i + 1) & (d->cap - 1)) {
        size_t home = slot_of(d, d->table[i].key);
        /* the entry at i may fill the hole if its home is not in (hole, i] cyclically */
        bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        d->table[hole] = d->table[i];
        d->table[i] = Resident{};
        hole = i;
    }
}

size_t dev_bytes(const Mat *W) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    return (data + 15) / 16 * 16 + aux;
}

DevMat dev_mat(const Mat *W, const uint8_t *dw) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    return DevMat{(int)W->fmt, W->rows, W->cols, dw, aux ? dw + (data + 15) / 16 * 16 : nullptr};
}

bool holds_weights(CudaDevice *d, const Mat *W) {
    if (!W->key.store || !d->cap) return false;
    const Resident *r = lookup(d, W->key);
    return r->key.store && r->key.gen == W->key.gen && same_shape(r, W) && r->bytes == dev_bytes(W);
}

const uint8_t *kept_weights(CudaDevice *d, const Mat *W) {
    const size_t bytes = dev_bytes(W);
    if (!W->key.store) return nullptr;
    table_room(d);
    Resident *r = lookup(d, W->key);
    if (r->key.store && r->in_slot) { /* an expert slot holds the item: the bytes filled, or older ones */
        if (r->key.gen == W->key.gen && same_shape(r, W) && r->bytes == bytes) {
            slot_ready(d, r->slot);
            d->slot_read = true;
            return (const uint8_t *)r->dev;
        }
        remove_entry(d, r), r = lookup(d, W->key); /* never refreshed in place: the slot is the model's */
    }
    if (r->key.store && same_shape(r, W) && r->bytes == bytes) {
        if (r->key.gen != W->key.gen) { /* new bytes behind the same item: refresh the copy */
            upload(d, (uint8_t *)r->dev, W);
            r->key.gen = W->key.gen;
        }
        return (const uint8_t *)r->dev;
    }
    if (r->key.store) remove_entry(d, r), r = lookup(d, W->key); /* the item changed shape */
    if (keep_copy(d, r, W, bytes)) {
        d->used++;
        return (const uint8_t *)r->dev;
    }
    return nullptr;
}

const uint8_t *device_weights(CudaDevice *d, const Mat *W, uint8_t *stage_at) {
    const uint8_t *kept = kept_weights(d, W);
    if (kept) return kept;
    return stage(d, W, dev_bytes(W), stage_at);
}

enum Op { OP_MUL, OP_MUL_HEADS, OP_TMUL_HEADS };

/* One product of any kind: weights, activations up, the kernel, results down; on the CPU when the
 * device has no room for it; zeros after a fault. */
void run(CudaDevice *d, Op op, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    const int heads = op == OP_MUL ? 1 : hd->heads;
    const size_t x_floats = op == OP_MUL ? (size_t)W->cols : (size_t)heads * (size_t)hd->x_stride;
    const size_t y_floats = op == OP_MUL ? (size_t)W->rows
                          : op == OP_MUL_HEADS ? (size_t)heads * (size_t)hd->n
                                               : (size_t)heads * (size_t)W->cols;
    const size_t xb = sizeof(float) * (size_t)T * x_floats, yb = sizeof(float) * (size_t)T * y_floats;
    Span sp = op == OP_MUL ? Span{0, 0, W->rows, x_floats, 0, y_floats}
                           : Span{hd->row0, hd->stride, hd->n, x_floats, (size_t)hd->x_stride, y_floats};
    pthread_mutex_lock(&d->mu);
    const uint8_t *dw = d->faulted ? nullptr : device_weights(d, W, nullptr);
    const bool room = dw && reserve(d, (void **)&d->x, &d->x_cap, xb) && reserve(d, (void **)&d->y, &d->y_cap, yb);
    if (room && !d->faulted && check(d, cudaMemcpyAsync(d->x, X, xb, cudaMemcpyHostToDevice, d->stream), "copying activations")) {
        MulJob job = {dev_mat(W, dw), sp, d->x, d->y};
        launch_products(d, &job, 1, heads, T, op == OP_TMUL_HEADS);
        (void)(!d->faulted &&
               check(d, cudaMemcpyAsync(Y, d->y, yb, cudaMemcpyDeviceToHost, d->stream), "copying results") &&
               check(d, cudaStreamSynchronize(d->stream), "matmul"));
    }
    const bool faulted = d->faulted;
    pthread_mutex_unlock(&d->mu);
    if (faulted) memset(Y, 0, yb); /* the forward fails (base.fault): its numbers need only be finite */
    else if (!room) { /* no room on the device for this one: the same bits on the CPU */
        if (op == OP_MUL) mat_mul_cpu(pool, Y, W, X, T);
        else if (op == OP_MUL_HEADS) mat_mul_heads_cpu(pool, Y, W, hd, X, T);
        else mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
    }
}

void cuda_mul(MatDevice *base, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    run((CudaDevice *)base, OP_MUL, pool, Y, W, nullptr, X, T);
}

void cuda_mul_heads(MatDevice *base, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    run((CudaDevice *)base, OP_MUL_HEADS, pool, Y, W, hd, X, T);
}

void cuda_tmul_heads(MatDevice *base, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    run((CudaDevice *)base, OP_TMUL_HEADS, pool, Y, W, hd, X, T);
}

const char *cuda_fault(MatDevice *base) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    const char *msg = d->faulted ? d->fault_msg : nullptr;
    pthread_mutex_unlock(&d->mu);
    return msg;
}

void cuda_counters(MatDevice *base, size_t *resident, size_t *streamed) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    *resident = d->resident, *streamed = d->streamed;
    pthread_mutex_unlock(&d->mu);
}

void cuda_host_buffer(MatDevice *base, void *p, size_t bytes) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    if (d->n_locked < MAX_HOST_BUFFERS &&
        (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess ||
         (cudaGetLastError(), cudaHostRegister(p, bytes, cudaHostRegisterReadOnly) == cudaSuccess))) /* a read-only mapping */
        d->locked[d->n_locked++] = p;
    cudaGetLastError(); /* a refusal only costs copy speed */
    pthread_mutex_unlock(&d->mu);
}

/* The streams and events a device made (those not made are NULL). */
void destroy_streams(CudaDevice *d) {
    if (d->fills_done) cudaEventDestroy(d->fills_done);
    if (d->slots_read) cudaEventDestroy(d->slots_read);
    if (d->copy_stream) cudaStreamDestroy(d->copy_stream);
    if (d->stream) cudaStreamDestroy(d->stream);
}

void cuda_close(MatDevice *base) {
    CudaDevice *d = (CudaDevice *)base;
    slots_free(d); /* (waits for the copies, which may read the page-locked buffers) */
    for (int i = 0; i < d->n_locked; i++) cudaHostUnregister(d->locked[i]);
    for (size_t i = 0; i < d->cap; i++)
        if (d->table[i].key.store && !d->table[i].in_slot) cudaFree(d->table[i].dev);
    cudaFree(d->x), cudaFree(d->y), cudaFree(d->stage), cudaFree(d->batch_stage);
    for (int i = 0; i < d->n_events; i++) cudaEventDestroy(d->marks[i]);
    destroy_streams(d);
    pthread_mutex_destroy(&d->mu);
    free(d->table);
    free(d);
}

/* The kernels are built for compute capability 8.0 and later (Makefile). */
bool usable(const cudaDeviceProp &p) { return p.major >= 8; }

} // namespace dfcuda

using namespace dfcuda;

extern "C" int cuda_device_available(void) {
    int n = 0;
    cudaDeviceProp p;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess && usable(p);
}

extern "C" int cuda_device_open(MatDevice **out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return df_fail("K3_DEV=cuda: no CUDA device answers (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    cudaDeviceProp p;
    size_t free_b = 0, total_b = 0;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess ||
        (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
        return df_fail("K3_DEV=cuda: cannot open GPU 0: %s", cudaGetErrorString(e));
    if (!usable(p))
        return df_fail("K3_DEV=cuda: GPU 0 (%.80s) has compute capability %d.%d; this build needs 8.0 or later", p.name,
                       p.major, p.minor);
    CudaDevice *d = (CudaDevice *)df_calloc(1, sizeof *d);
    if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&d->copy_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->fills_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->slots_read, cudaEventDisableTiming)) != cudaSuccess) {
        destroy_streams(d);
        free(d);
        return df_fail("K3_DEV=cuda: cannot create the streams: %s", cudaGetErrorString(e));
    }
    pthread_mutex_init(&d->mu, nullptr);
    d->budget = free_b > RESERVE ? free_b - RESERVE : 0;
    snprintf(d->base.desc, sizeof d->base.desc, "cuda (%.80s, %.1f GB, weights kept up to %.1f GB)", p.name,
             total_b / 1e9, d->budget / 1e9);
    d->base.mul = cuda_mul;
    d->base.mul_heads = cuda_mul_heads;
    d->base.tmul_heads = cuda_tmul_heads;
    d->base.counters = cuda_counters;
    d->base.close = cuda_close;
    d->base.host_buffer = cuda_host_buffer;
    d->base.fault = cuda_fault;
    d->base.ops = &layer_ops;
    d->base.expert_bytes = SIZE_MAX;
    d->base.weight_room = d->budget;
    grow_table(d);
    *out = &d->base;
    return 0;
}

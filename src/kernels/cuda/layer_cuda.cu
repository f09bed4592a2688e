/* layer_cuda.cu - the whole-layer operations of devops.h on the CUDA device: every step of a layer,
 * for a decode step or a chunk of rows, as kernels on device memory, queued on the device's stream.
 *
 * Each kernel computes what the model's CPU code computes, in the same per-element order (the KDA
 * convolution and delta rule, the MLA scores, the context sums, the expert combination, AttnRes's
 * weighted sum, routing's selection and weights are the CPU's loops, one thread per output), with
 * explicit roundings (built with --fmad=false). What differs is each sum over a whole vector that
 * the CPU adds left to right (RMSNorm, l2 norm and AttnRes sums of squares and dots in fp64, the
 * softmax denominators): here a block adds it by a fixed tree, so results stay deterministic and
 * independent of launch shapes, but are not bit-identical to the CPU's. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/exactmath.h"
#include "util/err.h"

namespace dfcuda {
namespace {

constexpr int RT = 256;          /* threads of a reducing block (a power of two) */
constexpr int EXPERTS_PER_LAUNCH = MAX_BATCH / 2;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The sum of every thread's v, added by a fixed tree (blockDim.x a power of two, at most 1024);
 * every thread of the block must call it. */
__device__ double block_sum(double v) {
    __shared__ double sh[1024];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v) {
    __shared__ float sh[1024];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* Sum of squares of x[0..n) in fp64 (each square exact). */
__device__ double sumsq(const float *x, int n) {
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i] * (double)x[i];
    return block_sum(s);
}

/* Row blockIdx.x: out = w * (x * inv), inv = 1 / sqrt(mean(x^2) + eps), then * sigmoid(gate). */
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, size_t stride, float eps, const float *gate) {
    const size_t row = (size_t)blockIdx.x * stride;
    const float inv = (float)(1.0 / sqrt(sumsq(x + row, n) / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[row + i] * inv;
        if (w) v = w[i] * v;
        if (gate) v = v * sigmoid(gate[row + i]);
        out[row + i] = v;
    }
}

/* AttnRes's values of row t: anchor i < n_anchors, then p. */
struct ResValues {
    const float *anchors, *p;
    int n_anchors, dim;
    size_t stride;
    __device__ const float *at(int i, int t) const {
        return i < n_anchors ? anchors + (size_t)i * stride + (size_t)t * dim : p + (size_t)t * dim;
    }
};

/* AttnRes score of value blockIdx.x of row blockIdx.y: q . rmsnorm(v), in fp64. */
__global__ void attnres_score_kernel(float *scores, ResValues rv, const float *q, float eps) {
    const int i = blockIdx.x, t = blockIdx.y, dim = rv.dim;
    const float *v = rv.at(i, t);
    const float inv = (float)(1.0 / sqrt(sumsq(v, dim) / dim + (double)eps));
    double s = 0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) s += (double)q[d] * (double)(v[d] * inv);
    s = block_sum(s);
    if (threadIdx.x == 0) scores[(size_t)t * (rv.n_anchors + 1) + i] = (float)s;
}

/* Row blockIdx.y: the scores' softmax (op_softmax's order, in every block), then out[d] = sum_i
 * score[i] * v_i[d]. */
__global__ void attnres_out_kernel(float *out, const float *scores, ResValues rv) {
    extern __shared__ float sc[];
    const int n = rv.n_anchors + 1, t = blockIdx.y;
    const float *row = scores + (size_t)t * n;
    if (threadIdx.x == 0) {
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = row[i] > mx ? row[i] : mx;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += (sc[i] = expf(row[i] - mx));
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < n; i++) sc[i] *= inv;
    }
    __syncthreads();
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= rv.dim) return;
    float acc = 0;
    for (int i = 0; i < n; i++) acc += sc[i] * rv.at(i, t)[d];
    out[(size_t)t * rv.dim + d] = acc;
}

__global__ void add_kernel(float *dst, const float *src, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

__global__ void gate_kernel(float *x, const float *g, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= sigmoid(g[i]);
}

/* op_situ: SiTU as the CPU computes it, bit for bit (kernels/exactmath.h): an expert gives the same
 * bits on the GPU and on the CPU threads. */
__global__ void situ_kernel(float *a, const float *b, size_t n, float beta, float beta_lin) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = exact_situ(a[i], b[i], beta, beta_lin);
}

/* KDA, stream blockIdx.y (q, k, v) of head blockIdx.x, one thread per channel, row after row: the
 * causal conv and SiLU (window advanced), the l2 norm of q and k, and (stream q) the channel's decay
 * and the head's beta. */
__global__ void kda_prep_kernel(DevKda a) {
    const int h = blockIdx.x, s = blockIdx.y, D = a.head_dim, K = a.kernel, W = a.heads * D, j = threadIdx.x;
    const bool on = j < D;
    const int c = h * D + j;
    float *hist = a.conv + ((size_t)s * W + (on ? c : 0)) * (size_t)(K - 1);
    const float *wc = a.conv_w[s] + (size_t)(on ? c : 0) * K;
    for (int t = 0; t < a.rows; t++) {
        const size_t at = (size_t)t * W + c;
        float y = 0;
        if (on) {
            const float cur = a.raw[s][at];
            float acc = 0;
            for (int i = 0; i < K - 1; i++) acc += wc[i] * hist[i];
            acc += wc[K - 1] * cur;
            y = acc * sigmoid(acc);
            if (K > 1) {
                for (int i = 0; i < K - 2; i++) hist[i] = hist[i + 1];
                hist[K - 2] = cur;
            }
        }
        if (s < 2) { /* x / max(||x||, 1e-12), then * scale: q by 1/sqrt(D), k by 1 */
            const double norm = sqrt(block_sum(on ? (double)y * (double)y : 0.0));
            const float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
            y = y * inv * (s == 0 ? 1.0f / sqrtf((float)D) : 1.0f);
        }
        if (!on) continue;
        a.qkv[s][at] = y;
        if (s != 0) continue;
        const float rate = a.per_channel ? a.decay_rate[j] : a.decay_rate[h];
        a.decay[at] = expf(a.gate_lower_bound * sigmoid(rate * (a.f[at] + a.dt_bias[c])));
        if (j == 0) a.beta[t * a.heads + h] = sigmoid(a.beta_raw[t * a.heads + h]);
    }
}

/* The delta rule for head blockIdx.x, one thread per value column j (delta_step's order for it), row
 * after row: decay S along the key axis, predict, correct toward v, read with q. */
__global__ void kda_delta_kernel(DevKda a) {
    extern __shared__ float sm[];
    const int h = blockIdx.x, D = a.head_dim, W = a.heads * D, j = blockIdx.y * blockDim.x + threadIdx.x;
    float *q = sm, *k = sm + D, *dc = sm + 2 * D;
    float *S = a.S + (size_t)h * D * D + (j < D ? j : 0);
    for (int t = 0; t < a.rows; t++) {
        const size_t row = (size_t)t * W + (size_t)h * D;
        __syncthreads(); /* the previous row's q, k and decay are read */
        for (int i = threadIdx.x; i < D; i += blockDim.x) q[i] = a.qkv[0][row + i], k[i] = a.qkv[1][row + i], dc[i] = a.decay[row + i];
        __syncthreads();
        if (j >= D) continue;
        float pred = 0;
#pragma unroll 8
        for (int i = 0; i < D; i++) pred += k[i] * (S[(size_t)i * D] * dc[i]);
        pred = a.beta[t * a.heads + h] * (a.qkv[2][row + j] - pred);
        float o = 0;
#pragma unroll 8
        for (int i = 0; i < D; i++) {
            float r = S[(size_t)i * D] * dc[i];
            r += k[i] * pred;
            S[(size_t)i * D] = r;
            o += q[i] * r;
        }
        a.o[row + j] = o;
    }
}

/* a . b in the kernels' reduction order (kernels_impl.h): 16 lanes of fused multiply-adds over
 * zero-padded columns, then the fixed tree. */
__device__ float dot16(const float *a, const float *b, int n) {
    float l[16];
#pragma unroll
    for (int i = 0; i < 16; i++) l[i] = 0.0f;
    int c = 0;
    for (; c + 16 <= n; c += 16)
#pragma unroll
        for (int i = 0; i < 16; i++) l[i] = __fmaf_rn(a[c + i], b[c + i], l[i]);
    if (c < n)
#pragma unroll
        for (int i = 0; i < 16; i++) l[i] = __fmaf_rn(c + i < n ? a[c + i] : 0.0f, c + i < n ? b[c + i] : 0.0f, l[i]);
#pragma unroll
    for (int i = 0; i < 8; i++) l[i] = l[i] + l[i + 8];
#pragma unroll
    for (int i = 0; i < 4; i++) l[i] = l[i] + l[i + 4];
#pragma unroll
    for (int i = 0; i < 2; i++) l[i] = l[i] + l[i + 2];
    return l[0] + l[1];
}

/* Row t's head h: its scores (a row of scores, n + rows - 1 apart) and the positions it sees. */
__device__ __forceinline__ size_t mla_head(const DevMla &a, int t, int h) { return (size_t)t * a.heads + h; }
__device__ __forceinline__ float *mla_scores(const DevMla &a, int t, int h) {
    return a.scores + mla_head(a, t, h) * (size_t)(a.n + a.rows - 1);
}

/* Score of head blockIdx.x of row blockIdx.z against cached position u (one thread each). */
__global__ void mla_score_kernel(DevMla a) {
    const int h = blockIdx.x, t = blockIdx.z, u = blockIdx.y * blockDim.x + threadIdx.x;
    if (u >= a.n + t) return;
    const int R = a.kv_lora, QK = a.qk_nope + a.qk_rope;
    const float *lat = a.latent + (size_t)u * (size_t)(R + a.qk_rope);
    const float *qpe = a.qf + mla_head(a, t, h) * QK + a.qk_nope;
    const float scale = 1.0f / sqrtf((float)QK);
    mla_scores(a, t, h)[u] = (dot16(a.qlat + mla_head(a, t, h) * R, lat, R) + dot16(qpe, lat + R, a.qk_rope)) * scale;
}

/* op_softmax over the n + t scores of head blockIdx.x of row blockIdx.y: the maximum, exp, the fp64
 * sum (by the tree), one reciprocal. */
__global__ void mla_softmax_kernel(DevMla a) {
    const int n = a.n + (int)blockIdx.y;
    float *x = mla_scores(a, blockIdx.y, blockIdx.x);
    float mx = -INFINITY;
    for (int u = threadIdx.x; u < n; u += blockDim.x) mx = fmaxf(mx, x[u]);
    mx = block_max(mx);
    double s = 0;
    for (int u = threadIdx.x; u < n; u += blockDim.x) s += (x[u] = expf(x[u] - mx));
    const float inv = (float)(1.0 / block_sum(s));
    for (int u = threadIdx.x; u < n; u += blockDim.x) x[u] *= inv;
}

/* lctx[t][h][i] = sum over positions u, in order, of p_u * latent[u][i] (op_axpy's order), for head
 * blockIdx.x of row blockIdx.z. */
__global__ void mla_context_kernel(DevMla a) {
    const int h = blockIdx.x, t = blockIdx.z, i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= a.kv_lora) return;
    const size_t KVW = (size_t)(a.kv_lora + a.qk_rope);
    const float *p = mla_scores(a, t, h);
    float acc = 0;
    for (int u = 0; u < a.n + t; u++) acc += p[u] * a.latent[(size_t)u * KVW + i];
    a.lctx[mla_head(a, t, h) * a.kv_lora + i] = acc;
}

/* Whether (v, e) comes before (bv, be): larger first, lower index on ties. */
__device__ __forceinline__ bool before(float v, int e, float bv, int be) { return v > bv || (v == bv && e < be); }

/* op_route (kernels/vecops.h) for row blockIdx.x, in one block: k rounds of a block-wide choice of the best remaining
 * expert (chosen ones become NaN, which nothing prefers), then the weights in routing order. */
__global__ void route_kernel(const float *logits, const float *bias, int ne, int k, int *ids, float *weights) {
    extern __shared__ float choice[];
    logits += (size_t)blockIdx.x * ne, ids += blockIdx.x * k, weights += blockIdx.x * k;
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    __shared__ int chosen[64];
    for (int e = threadIdx.x; e < ne; e += blockDim.x) choice[e] = sigmoid(logits[e]) + bias[e];
    __syncthreads();
    for (int r = 0; r < k; r++) {
        float v = -INFINITY;
        int best = INT_MAX;
        for (int e = threadIdx.x; e < ne; e += blockDim.x)
            if (before(choice[e], e, v, best)) v = choice[e], best = e;
        bv[threadIdx.x] = v, bi[threadIdx.x] = best;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s && before(bv[threadIdx.x + s], bi[threadIdx.x + s], bv[threadIdx.x], bi[threadIdx.x]))
                bv[threadIdx.x] = bv[threadIdx.x + s], bi[threadIdx.x] = bi[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) chosen[r] = bi[0], choice[bi[0]] = NAN;
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    double sum = 0;
    for (int i = 0; i < k; i++) sum += (weights[i] = sigmoid(logits[chosen[i]]));
    const float denom = (float)sum + 1e-20f;
    for (int i = 0; i < k; i++) ids[i] = chosen[i], weights[i] /= denom;
}

/* y[t][d] = sum over i < k, in order, of weights[t][i] * eo[t][i][d], for row t = blockIdx.y. */
__global__ void combine_kernel(float *y, const float *eo, const float *weights, int k, int n) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (d >= n) return;
    eo += (size_t)t * k * n, weights += (size_t)t * k;
    float acc = 0;
    for (int i = 0; i < k; i++) acc += weights[i] * eo[(size_t)i * n + d];
    y[(size_t)t * n + d] = acc;
}

/* dst row blockIdx.y = src row idx[blockIdx.y]. */
__global__ void gather_kernel(float *dst, const float *src, const int *idx, int width) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d < width) dst[(size_t)blockIdx.y * width + d] = src[(size_t)idx[blockIdx.y] * width + d];
}

__global__ void scatter_kernel(float *dst, const float *src, const int *idx, int width) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d < width) dst[(size_t)idx[blockIdx.y] * width + d] = src[(size_t)blockIdx.y * width + d];
}

/* The most rows one launch of a row kernel covers (a grid's y dimension). */
constexpr int GRID_Y_MAX = 65535;

unsigned blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* Threads for a block that holds one head's channels: a power of two, at least a warp. */
unsigned head_threads(int D) {
    unsigned t = 32;
    while (t < (unsigned)D) t *= 2;
    return t;
}

/* Copies from host memory may still be in flight (page-locked buffers copy asynchronously), and the
 * store may refill that memory once the model moves on: wait for them before returning. */
void settle_uploads(CudaDevice *d) {
    if (d->uploaded) check(d, cudaStreamSynchronize(d->stream), "copying weights");
    d->uploaded = false;
}

void *op_alloc(MatDevice *base, size_t bytes) {
    Locked L(base);
    void *p = nullptr;
    if (!L.ok()) {
        df_fail("%s", L.d->fault_msg);
        return nullptr;
    }
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        df_fail("cuda: no room for %.1f MB of activations and state on the GPU (%s)", bytes / 1e6, cudaGetErrorString(e));
        return nullptr;
    }
    if (!check(L.d, cudaMemsetAsync(p, 0, bytes, L.d->stream), "clearing device memory")) {
        cudaFree(p);
        df_fail("%s", L.d->fault_msg);
        return nullptr;
    }
    L.d->allocated += bytes;
    return p;
}

void op_release(MatDevice *base, void *p, size_t bytes) {
    if (!p) return;
    Locked L(base);
    cudaFree(p);
    L.d->allocated -= bytes < L.d->allocated ? bytes : L.d->allocated;
}

void op_put(MatDevice *base, void *dst, const void *src, size_t bytes) {
    Locked L(base);
    if (L.ok() && bytes) check(L.d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, L.d->stream), "copying to the GPU");
}

void op_copy(MatDevice *base, void *dst, const void *src, size_t bytes) {
    Locked L(base);
    if (L.ok() && bytes) check(L.d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, L.d->stream), "copying on the GPU");
}

int op_get(MatDevice *base, void *dst, const void *src, size_t bytes) {
    Locked L(base);
    run_recording(L.d);
    if (L.ok() && bytes) check(L.d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, L.d->stream), "copying from the GPU");
    if (L.ok()) check(L.d, cudaStreamSynchronize(L.d->stream), "a layer's kernels");
    if (L.ok()) return 0;
    if (bytes) memset(dst, 0, bytes);
    return df_fail("%s", L.d->fault_msg);
}

int op_keep(MatDevice *base, const Mat *W) {
    Locked L(base);
    const bool kept = L.ok() && kept_weights(L.d, W) != nullptr;
    settle_uploads(L.d);
    return kept;
}

int op_holds(MatDevice *base, const Mat *W) {
    Locked L(base);
    return L.ok() && holds_weights(L.d, W);
}

/* One product of T rows on device memory: the weights (kept or staged), the kernel. */
void product(MatDevice *base, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T, bool tmul) {
    Locked L(base);
    if (!L.ok()) return;
    const uint8_t *dw = device_weights(L.d, W, nullptr);
    if (!dw) {
        if (!L.d->faulted)
            snprintf(L.d->fault_msg, sizeof L.d->fault_msg, "cuda: no room on the GPU for a %d x %d weight", W->rows, W->cols);
        L.d->faulted = true;
        return;
    }
    const int heads = hd ? hd->heads : 1;
    const size_t x_t = hd ? (size_t)heads * (size_t)hd->x_stride : (size_t)W->cols;
    const Span sp = hd ? Span{hd->row0, hd->stride, hd->n, x_t, (size_t)hd->x_stride, (size_t)heads * (size_t)hd->n}
                       : Span{0, 0, W->rows, x_t, 0, (size_t)W->rows};
    MulJob job = {dev_mat(W, dw), sp, X, Y};
    layer_products(L.d, &job, 1, heads, T, tmul);
    slots_read_done(L.d);
    settle_uploads(L.d);
}

void op_mul(MatDevice *d, float *Y, const Mat *W, const float *X, int T) { product(d, Y, W, nullptr, X, T, false); }
void op_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    product(d, Y, W, hd, X, T, false);
}
void op_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    product(d, Y, W, hd, X, T, true);
}

void op_rmsnorm(MatDevice *base, float *out, const float *x, const float *w, int n, int rows, size_t stride, float eps,
                const float *gate) {
    Locked L(base);
    if (!L.ok()) return;
    rmsnorm_kernel<<<rows, RT, 0, L.d->stream>>>(out, x, w, n, stride, eps, gate);
    L.launched("rmsnorm kernel");
}

void op_attnres(MatDevice *base, float *out, const float *anchors, int n_anchors, size_t anchor_stride, const float *p,
                const float *q, int dim, int rows, float eps, float *scores) {
    Locked L(base);
    if (!L.ok()) return;
    const ResValues rv = {anchors, p, n_anchors, dim, anchor_stride};
    attnres_score_kernel<<<dim3((unsigned)n_anchors + 1, (unsigned)rows), RT, 0, L.d->stream>>>(scores, rv, q, eps);
    attnres_out_kernel<<<dim3(blocks(dim, RT), (unsigned)rows), RT, sizeof(float) * (n_anchors + 1), L.d->stream>>>(out, scores,
                                                                                                                      rv);
    L.launched("AttnRes kernels");
}

void op_add(MatDevice *base, float *dst, const float *src, size_t n) {
    Locked L(base);
    if (!L.ok()) return;
    add_kernel<<<blocks(n, RT), RT, 0, L.d->stream>>>(dst, src, n);
    L.launched("add kernel");
}

void op_gate(MatDevice *base, float *x, const float *g, size_t n) {
    Locked L(base);
    if (!L.ok()) return;
    gate_kernel<<<blocks(n, RT), RT, 0, L.d->stream>>>(x, g, n);
    L.launched("gate kernel");
}

void op_situ(MatDevice *base, float *a, const float *b, size_t n, float beta, float beta_lin) {
    Locked L(base);
    if (!L.ok()) return;
    situ_kernel<<<blocks(n, RT), RT, 0, L.d->stream>>>(a, b, n, beta, beta_lin);
    L.launched("SiTU kernel");
}

void op_kda(MatDevice *base, const DevKda *a) {
    Locked L(base);
    if (!L.ok()) return;
    const int D = a->head_dim;
    if (a->rows < 1) return;
    kda_prep_kernel<<<dim3((unsigned)a->heads, 3), head_threads(D), 0, L.d->stream>>>(*a);
    kda_delta_kernel<<<dim3((unsigned)a->heads, blocks(D, 32)), 32, 3 * sizeof(float) * D, L.d->stream>>>(*a);
    L.launched("KDA kernels");
}

void op_mla(MatDevice *base, const DevMla *a) {
    Locked L(base);
    if (!L.ok()) return;
    const unsigned rows = (unsigned)a->rows;
    mla_score_kernel<<<dim3((unsigned)a->heads, blocks(a->n + a->rows - 1, 128), rows), 128, 0, L.d->stream>>>(*a);
    mla_softmax_kernel<<<dim3((unsigned)a->heads, rows), RT, 0, L.d->stream>>>(*a);
    mla_context_kernel<<<dim3((unsigned)a->heads, blocks(a->kv_lora, 128), rows), 128, 0, L.d->stream>>>(*a);
    L.launched("MLA kernels");
}

void op_route(MatDevice *base, const float *logits, const float *bias, int n_experts, int k, int rows, int *ids,
              float *weights) {
    Locked L(base);
    if (!L.ok()) return;
    route_kernel<<<rows, 1024, sizeof(float) * n_experts, L.d->stream>>>(logits, bias, n_experts, k, ids, weights);
    L.launched("routing kernel");
}

/* Experts [at, at + m) of a call, each on `rows` rows: expert i reads them from X + x_row[i] * latent
 * (x_row NULL: row 0) and writes them to out + y_row[i] * latent; their weights (in their expert slot
 * when dslot names one, kept, or staged side by side for this launch), gate and up in one launch into
 * h (expert i of the launch at row i * rows of each half of h_rows rows), SiTU, down in one launch. */
void expert_launch(CudaDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot,
                   const int *x_row, const int *y_row, int rows, int at, int m, const float *X, float *h, size_t h_rows,
                   float *out, float beta,
                   float beta_lin) {
    const Mat *mats[3 * EXPERTS_PER_LAUNCH];
    const uint8_t *dw[3 * EXPERTS_PER_LAUNCH];
    const int part[3] = {0, 2, 1}; /* of a slot (w1, w2, w3) for gate, up, down */
    size_t staged = 0;
    for (int i = 0; i < m; i++) mats[3 * i] = w1[at + i], mats[3 * i + 1] = w3[at + i], mats[3 * i + 2] = w2[at + i];
    for (int i = 0; i < 3 * m; i++) {
        const int ds = dslot ? dslot[at + i / 3] : -1;
        dw[i] = ds >= 0 ? slot_memory(d, ds, mats[i], part[i % 3]) : kept_weights(d, mats[i]);
        if (ds >= 0 && !dw[i]) return; /* (a fault) */
        if (!dw[i]) staged += (dev_bytes(mats[i]) + 255) / 256 * 256; /* each staged copy 256-byte aligned */
    }
    if (staged && !reserve(d, (void **)&d->batch_stage, &d->batch_stage_cap, staged)) {
        snprintf(d->fault_msg, sizeof d->fault_msg, "cuda: no room on the GPU to stage %.1f MB of experts", staged / 1e6);
        d->faulted = true;
        return;
    }
    size_t off = 0;
    for (int i = 0; i < 3 * m; i++)
        if (!dw[i]) {
            dw[i] = device_weights(d, mats[i], d->batch_stage + off);
            off += (dev_bytes(mats[i]) + 255) / 256 * 256;
        }
    const int inter = w1[at]->rows, latent = w1[at]->cols;
    float *h3 = h + h_rows * inter;
    MulJob jobs[MAX_BATCH];
    for (int i = 0; i < m; i++) {
        const Span sp = {0, 0, inter, (size_t)latent, 0, (size_t)inter};
        const float *x = X + (size_t)(x_row ? x_row[at + i] : 0) * latent;
        jobs[2 * i] = MulJob{dev_mat(mats[3 * i], dw[3 * i]), sp, x, h + (size_t)i * rows * inter};
        jobs[2 * i + 1] = MulJob{dev_mat(mats[3 * i + 1], dw[3 * i + 1]), sp, x, h3 + (size_t)i * rows * inter};
    }
    layer_products(d, jobs, 2 * m, 1, rows, false);
    const size_t hn = (size_t)m * rows * inter;
    situ_kernel<<<blocks(hn, RT), RT, 0, d->stream>>>(h, h3, hn, beta, beta_lin);
    for (int i = 0; i < m; i++) {
        const Span sp = {0, 0, latent, (size_t)inter, 0, (size_t)latent};
        jobs[i] = MulJob{dev_mat(mats[3 * i + 2], dw[3 * i + 2]), sp, h + (size_t)i * rows * inter,
                         out + (size_t)y_row[at + i] * latent};
    }
    layer_products(d, jobs, m, 1, rows, false);
    check(d, cudaGetLastError(), "expert kernels");
    slots_read_done(d);
}

/* A call's experts whose weights the device did not keep were copied from host memory: with wait,
 * until those copies are done. */
void experts_done(CudaDevice *d, int wait) {
    if (wait) settle_uploads(d);
    else d->uploaded = false;
}

void op_experts(MatDevice *base, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot,
                const int *dslot, int n, const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    Locked L(base);
    for (int at = 0; at < n && L.ok(); at += EXPERTS_PER_LAUNCH) {
        const int m = n - at < EXPERTS_PER_LAUNCH ? n - at : EXPERTS_PER_LAUNCH;
        expert_launch(L.d, w1, w2, w3, dslot, nullptr, slot, 1, at, m, z, h, (size_t)n, out, beta, beta_lin);
    }
    experts_done(L.d, wait);
}

/* Runs of experts with equal rows, up to EXPERTS_PER_LAUNCH, share a launch. */
void op_experts_rows(MatDevice *base, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot,
                     const int *at, const int *rows, int n, const float *X, float *h, int h_rows, float *out, float beta,
                     float beta_lin, int wait) {
    Locked L(base);
    for (int i = 0, m; i < n && L.ok(); i += m) {
        for (m = 1; i + m < n && m < EXPERTS_PER_LAUNCH && rows[i + m] == rows[i];) m++;
        expert_launch(L.d, w1, w2, w3, dslot, at, at, rows[i], i, m, X, h, (size_t)h_rows, out, beta, beta_lin);
    }
    experts_done(L.d, wait);
}

void op_gather(MatDevice *base, float *dst, const float *src, const int *idx, int n, int width) {
    Locked L(base);
    for (int at = 0, rows; L.ok() && at < n; at += rows) {
        rows = n - at < GRID_Y_MAX ? n - at : GRID_Y_MAX;
        gather_kernel<<<dim3(blocks(width, RT), (unsigned)rows), RT, 0, L.d->stream>>>(dst + (size_t)at * width, src,
                                                                                     idx + at, width);
        L.launched("gather kernel");
    }
}

void op_scatter(MatDevice *base, float *dst, const float *src, const int *idx, int n, int width) {
    Locked L(base);
    for (int at = 0, rows; L.ok() && at < n; at += rows) {
        rows = n - at < GRID_Y_MAX ? n - at : GRID_Y_MAX;
        scatter_kernel<<<dim3(blocks(width, RT), (unsigned)rows), RT, 0, L.d->stream>>>(dst, src + (size_t)at * width,
                                                                                      idx + at, width);
        L.launched("scatter kernel");
    }
}

void op_combine(MatDevice *base, float *y, const float *eo, const float *weights, int k, int n, int rows) {
    Locked L(base);
    if (!L.ok()) return;
    combine_kernel<<<dim3(blocks(n, RT), (unsigned)rows), RT, 0, L.d->stream>>>(y, eo, weights, k, n);
    L.launched("combine kernel");
}

void op_mark(MatDevice *base, int phase) {
    Locked L(base);
    CudaDevice *d = L.d;
    if (!L.ok() || d->n_marks >= MAX_MARKS) return;
    if (d->n_marks == d->n_events && !check(d, cudaEventCreate(&d->marks[d->n_events]), "creating an event")) return;
    if (d->n_marks == d->n_events) d->n_events++;
    d->mark_phase[d->n_marks] = phase;
    /* in a recording, an event record node that records the event when the graph runs (without the
     * flag, capture would take the record for an ordering between streams and time nothing) */
    check(d, cudaEventRecordWithFlags(d->marks[d->n_marks++], d->stream, d->recording ? cudaEventRecordExternal : 0),
          "recording an event");
}

void op_phase_times(MatDevice *base, double *secs) {
    Locked L(base);
    CudaDevice *d = L.d;
    for (int i = 1; i < d->n_marks && L.ok(); i++) {
        float ms = 0;
        if (check(d, cudaEventElapsedTime(&ms, d->marks[i - 1], d->marks[i]), "reading an event"))
            secs[d->mark_phase[i - 1]] += ms / 1e3;
    }
    d->n_marks = 0;
}

/* Stream capture in relaxed mode: the CPU threads' work and the copy stream's fills go on beside
 * it, and nothing recorded waits for them (record's contract keeps expert launches out). A capture
 * that cannot start costs only the graph: the stretch is launched one by one. */
int op_record(MatDevice *base, int key) {
    Locked L(base);
    CudaDevice *d = L.d;
    if (!L.ok() || !d->base.graphs || d->recording || key < 0 || key >= MAX_GRAPHS) return 0;
    if (cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) return cudaGetLastError(), 0;
    d->recording = key + 1;
    return 1;
}

} // namespace

void run_recording(CudaDevice *d) {
    if (!d->recording) return;
    cudaGraphExec_t &exec = d->graphs[d->recording - 1];
    d->recording = 0;
    cudaGraph_t graph = nullptr;
    const bool ok = check(d, cudaStreamEndCapture(d->stream, &graph), "recording a graph") && !d->faulted;
    if (ok && exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) { /* other launches: build it again */
            cudaGetLastError();
            cudaGraphExecDestroy(exec);
            exec = nullptr;
        }
    }
    if (ok && !exec && !check(d, cudaGraphInstantiate(&exec, graph, 0), "building a graph")) exec = nullptr;
    if (ok && exec) check(d, cudaGraphLaunch(exec, d->stream), "running a graph");
    if (graph) cudaGraphDestroy(graph);
}

const DevOps layer_ops = {op_alloc, op_release, op_put, op_copy, op_get, op_keep, op_holds, op_mul, op_mul_heads, op_tmul_heads,
                          op_rmsnorm, op_attnres, op_add, op_gate, op_situ, op_kda, op_mla, op_route, op_experts,
                          op_experts_rows, op_gather, op_combine, op_mark, op_phase_times, op_expert_slots, op_slot_fill,
                          op_fills_wait, op_record, nullptr, op_scatter};

} // namespace dfcuda

/* layer_cuda.cu - the whole-layer operations of devops.h on the CUDA device: every step of a decode
 * layer as kernels on device memory, queued on the device's stream.
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
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, float eps, const float *gate) {
    const size_t row = (size_t)blockIdx.x * (size_t)n;
    const float inv = (float)(1.0 / sqrt(sumsq(x + row, n) / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[row + i] * inv;
        if (w) v = w[i] * v;
        if (gate) v = v * sigmoid(gate[row + i]);
        out[row + i] = v;
    }
}

/* AttnRes score of value blockIdx.x (anchors, then p): q . rmsnorm(v), in fp64. */
__global__ void attnres_score_kernel(float *scores, const float *anchors, int n_anchors, const float *p,
                                     const float *q, int dim, float eps) {
    const int i = blockIdx.x;
    const float *v = i < n_anchors ? anchors + (size_t)i * dim : p;
    const float inv = (float)(1.0 / sqrt(sumsq(v, dim) / dim + (double)eps));
    double s = 0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) s += (double)q[d] * (double)(v[d] * inv);
    s = block_sum(s);
    if (threadIdx.x == 0) scores[i] = (float)s;
}

/* The scores' softmax (op_softmax's order, in every block), then out[d] = sum_i score[i] * v_i[d]. */
__global__ void attnres_out_kernel(float *out, const float *scores, const float *anchors, int n_anchors, const float *p,
                                   int dim) {
    extern __shared__ float sc[];
    const int n = n_anchors + 1;
    if (threadIdx.x == 0) {
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = scores[i] > mx ? scores[i] : mx;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += (sc[i] = expf(scores[i] - mx));
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < n; i++) sc[i] *= inv;
    }
    __syncthreads();
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dim) return;
    float acc = 0;
    for (int i = 0; i < n; i++) acc += sc[i] * (i < n_anchors ? anchors[(size_t)i * dim + d] : p[d]);
    out[d] = acc;
}

__global__ void add_kernel(float *dst, const float *src, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

__global__ void gate_kernel(float *x, const float *g, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= sigmoid(g[i]);
}

/* op_situ: [beta * tanh(a/beta) * sigmoid(a)] * [beta_lin * tanh(b/beta_lin)], in its order. */
__global__ void situ_kernel(float *a, const float *b, size_t n, float beta, float beta_lin) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gate = tanhf(a[i] / beta) * beta * sigmoid(a[i]);
    a[i] = gate * (tanhf(b[i] / beta_lin) * beta_lin);
}

/* KDA, stream blockIdx.y (q, k, v) of head blockIdx.x, one thread per channel: the causal conv and
 * SiLU (window advanced), the l2 norm of q and k, and (stream q) the channel's decay and the head's
 * beta. */
__global__ void kda_prep_kernel(DevKda a) {
    const int h = blockIdx.x, s = blockIdx.y, D = a.head_dim, K = a.kernel, W = a.heads * D, j = threadIdx.x;
    const bool on = j < D;
    const int c = h * D + j;
    float y = 0;
    if (on) {
        float *hist = a.conv + ((size_t)s * W + c) * (size_t)(K - 1);
        const float *wc = a.conv_w[s] + (size_t)c * K;
        const float cur = a.raw[s][c];
        float acc = 0;
        for (int t = 0; t < K - 1; t++) acc += wc[t] * hist[t];
        acc += wc[K - 1] * cur;
        y = acc * sigmoid(acc);
        if (K > 1) {
            for (int t = 0; t < K - 2; t++) hist[t] = hist[t + 1];
            hist[K - 2] = cur;
        }
    }
    if (s < 2) { /* x / max(||x||, 1e-12), then * scale: q by 1/sqrt(D), k by 1 */
        const double norm = sqrt(block_sum(on ? (double)y * (double)y : 0.0));
        const float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
        y = y * inv * (s == 0 ? 1.0f / sqrtf((float)D) : 1.0f);
    }
    if (!on) return;
    a.qkv[s][c] = y;
    if (s != 0) return;
    const float rate = a.per_channel ? a.decay_rate[j] : a.decay_rate[h];
    a.decay[c] = expf(a.gate_lower_bound * sigmoid(rate * (a.f[c] + a.dt_bias[c])));
    if (j == 0) a.beta[h] = sigmoid(a.beta_raw[h]);
}

/* The delta rule for head blockIdx.x, one thread per value column j (delta_step's order for it):
 * decay S along the key axis, predict, correct toward v, read with q. */
__global__ void kda_delta_kernel(DevKda a) {
    extern __shared__ float sm[];
    const int h = blockIdx.x, D = a.head_dim, j = blockIdx.y * blockDim.x + threadIdx.x;
    float *q = sm, *k = sm + D, *dc = sm + 2 * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        q[i] = a.qkv[0][h * D + i], k[i] = a.qkv[1][h * D + i], dc[i] = a.decay[h * D + i];
    }
    __syncthreads();
    if (j >= D) return;
    float *S = a.S + (size_t)h * D * D + j;
    float pred = 0;
#pragma unroll 8
    for (int i = 0; i < D; i++) pred += k[i] * (S[(size_t)i * D] * dc[i]);
    pred = a.beta[h] * (a.qkv[2][h * D + j] - pred);
    float o = 0;
#pragma unroll 8
    for (int i = 0; i < D; i++) {
        float r = S[(size_t)i * D] * dc[i];
        r += k[i] * pred;
        S[(size_t)i * D] = r;
        o += q[i] * r;
    }
    a.o[h * D + j] = o;
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

/* Score of head blockIdx.x against cached position u (one thread each). */
__global__ void mla_score_kernel(DevMla a) {
    const int h = blockIdx.x, u = blockIdx.y * blockDim.x + threadIdx.x;
    if (u >= a.n) return;
    const int R = a.kv_lora, QK = a.qk_nope + a.qk_rope;
    const float *lat = a.latent + (size_t)u * (size_t)(R + a.qk_rope);
    const float *qpe = a.qf + (size_t)h * QK + a.qk_nope;
    const float scale = 1.0f / sqrtf((float)QK);
    a.scores[(size_t)h * a.n + u] = (dot16(a.qlat + (size_t)h * R, lat, R) + dot16(qpe, lat + R, a.qk_rope)) * scale;
}

/* op_softmax over head blockIdx.x's n scores: the maximum, exp, the fp64 sum (by the tree), one
 * reciprocal. */
__global__ void mla_softmax_kernel(DevMla a) {
    float *x = a.scores + (size_t)blockIdx.x * a.n;
    float mx = -INFINITY;
    for (int u = threadIdx.x; u < a.n; u += blockDim.x) mx = fmaxf(mx, x[u]);
    mx = block_max(mx);
    double s = 0;
    for (int u = threadIdx.x; u < a.n; u += blockDim.x) s += (x[u] = expf(x[u] - mx));
    const float inv = (float)(1.0 / block_sum(s));
    for (int u = threadIdx.x; u < a.n; u += blockDim.x) x[u] *= inv;
}

/* lctx[h][i] = sum over positions u, in order, of p_u * latent[u][i] (op_axpy's order). */
__global__ void mla_context_kernel(DevMla a) {
    const int h = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= a.kv_lora) return;
    const size_t KVW = (size_t)(a.kv_lora + a.qk_rope);
    const float *p = a.scores + (size_t)h * a.n;
    float acc = 0;
    for (int u = 0; u < a.n; u++) acc += p[u] * a.latent[(size_t)u * KVW + i];
    a.lctx[(size_t)h * a.kv_lora + i] = acc;
}

/* Whether (v, e) comes before (bv, be): larger first, lower index on ties. */
__device__ __forceinline__ bool before(float v, int e, float bv, int be) { return v > bv || (v == bv && e < be); }

/* moe_route for one row, in one block: k rounds of a block-wide choice of the best remaining
 * expert (chosen ones become NaN, which nothing prefers), then the weights in routing order. */
__global__ void route_kernel(const float *logits, const float *bias, int ne, int k, int *ids, float *weights) {
    extern __shared__ float choice[];
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

/* y[d] = sum over i < k, in order, of weights[i] * eo[i][d]. */
__global__ void combine_kernel(float *y, const float *eo, const float *weights, int k, int n) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n) return;
    float acc = 0;
    for (int i = 0; i < k; i++) acc += weights[i] * eo[(size_t)i * n + d];
    y[d] = acc;
}

unsigned blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* Threads for a block that holds one head's channels: a power of two, at least a warp. */
unsigned head_threads(int D) {
    unsigned t = 32;
    while (t < (unsigned)D) t *= 2;
    return t;
}

/* Each operation: the device, locked, skipped after a fault. */
struct Locked {
    CudaDevice *d;
    explicit Locked(MatDevice *base) : d((CudaDevice *)base) { pthread_mutex_lock(&d->mu); }
    ~Locked() { pthread_mutex_unlock(&d->mu); }
    bool ok() const { return !d->faulted; }
    bool launched(const char *what) { return check(d, cudaGetLastError(), what); }
};

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

/* One product on device memory: the weights (kept or staged), the kernel. */
void product(MatDevice *base, float *Y, const Mat *W, const MatHeads *hd, const float *X, bool tmul) {
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
    launch_products(L.d, &job, 1, heads, 1, tmul);
    settle_uploads(L.d);
}

void op_mul(MatDevice *d, float *Y, const Mat *W, const float *X) { product(d, Y, W, nullptr, X, false); }
void op_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X) { product(d, Y, W, hd, X, false); }
void op_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X) { product(d, Y, W, hd, X, true); }

void op_rmsnorm(MatDevice *base, float *out, const float *x, const float *w, int n, int rows, float eps, const float *gate) {
    Locked L(base);
    if (!L.ok()) return;
    rmsnorm_kernel<<<rows, RT, 0, L.d->stream>>>(out, x, w, n, eps, gate);
    L.launched("rmsnorm kernel");
}

void op_attnres(MatDevice *base, float *out, const float *anchors, int n_anchors, const float *p, const float *q, int dim,
                float eps, float *scores) {
    Locked L(base);
    if (!L.ok()) return;
    attnres_score_kernel<<<n_anchors + 1, RT, 0, L.d->stream>>>(scores, anchors, n_anchors, p, q, dim, eps);
    attnres_out_kernel<<<blocks(dim, RT), RT, sizeof(float) * (n_anchors + 1), L.d->stream>>>(out, scores, anchors, n_anchors,
                                                                                               p, dim);
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
    kda_prep_kernel<<<dim3((unsigned)a->heads, 3), head_threads(D), 0, L.d->stream>>>(*a);
    kda_delta_kernel<<<dim3((unsigned)a->heads, blocks(D, 32)), 32, 3 * sizeof(float) * D, L.d->stream>>>(*a);
    L.launched("KDA kernels");
}

void op_mla(MatDevice *base, const DevMla *a) {
    Locked L(base);
    if (!L.ok()) return;
    mla_score_kernel<<<dim3((unsigned)a->heads, blocks(a->n, 128)), 128, 0, L.d->stream>>>(*a);
    mla_softmax_kernel<<<a->heads, RT, 0, L.d->stream>>>(*a);
    mla_context_kernel<<<dim3((unsigned)a->heads, blocks(a->kv_lora, 128)), 128, 0, L.d->stream>>>(*a);
    L.launched("MLA kernels");
}

void op_route(MatDevice *base, const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights) {
    Locked L(base);
    if (!L.ok()) return;
    route_kernel<<<1, 1024, sizeof(float) * n_experts, L.d->stream>>>(logits, bias, n_experts, k, ids, weights);
    L.launched("routing kernel");
}

/* Experts [at, at + m) of a layer's batch: their weights (kept, or staged side by side for this
 * launch), gate and up in one launch, SiTU, down in one launch. */
void expert_launch(CudaDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot, int at,
                   int m, int n, const float *z, float *h, float *out, float beta, float beta_lin) {
    const Mat *mats[3 * EXPERTS_PER_LAUNCH];
    const uint8_t *dw[3 * EXPERTS_PER_LAUNCH];
    size_t staged = 0;
    for (int i = 0; i < m; i++) mats[3 * i] = w1[at + i], mats[3 * i + 1] = w3[at + i], mats[3 * i + 2] = w2[at + i];
    for (int i = 0; i < 3 * m; i++) {
        dw[i] = kept_weights(d, mats[i]);
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
    MulJob jobs[MAX_BATCH];
    for (int i = 0; i < m; i++) { /* h1 of expert e at h + e * inter, h3 at h + (n + e) * inter */
        const Span sp = {0, 0, inter, (size_t)latent, 0, (size_t)inter};
        jobs[2 * i] = MulJob{dev_mat(mats[3 * i], dw[3 * i]), sp, z, h + (size_t)(at + i) * inter};
        jobs[2 * i + 1] = MulJob{dev_mat(mats[3 * i + 1], dw[3 * i + 1]), sp, z, h + (size_t)(n + at + i) * inter};
    }
    launch_products(d, jobs, 2 * m, 1, 1, false);
    const size_t hn = (size_t)m * inter;
    situ_kernel<<<blocks(hn, RT), RT, 0, d->stream>>>(h + (size_t)at * inter, h + (size_t)(n + at) * inter, hn, beta, beta_lin);
    for (int i = 0; i < m; i++) {
        const Span sp = {0, 0, latent, (size_t)inter, 0, (size_t)latent};
        jobs[i] = MulJob{dev_mat(mats[3 * i + 2], dw[3 * i + 2]), sp, h + (size_t)(at + i) * inter,
                         out + (size_t)slot[at + i] * latent};
    }
    launch_products(d, jobs, m, 1, 1, false);
    check(d, cudaGetLastError(), "expert kernels");
}

void op_experts(MatDevice *base, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot, int n,
                const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    Locked L(base);
    for (int at = 0; at < n && L.ok(); at += EXPERTS_PER_LAUNCH) {
        const int m = n - at < EXPERTS_PER_LAUNCH ? n - at : EXPERTS_PER_LAUNCH;
        expert_launch(L.d, w1, w2, w3, slot, at, m, n, z, h, out, beta, beta_lin);
    }
    if (wait) settle_uploads(L.d);
    else L.d->uploaded = false;
}

void op_combine(MatDevice *base, float *y, const float *eo, const float *weights, int k, int n) {
    Locked L(base);
    if (!L.ok()) return;
    combine_kernel<<<blocks(n, RT), RT, 0, L.d->stream>>>(y, eo, weights, k, n);
    L.launched("combine kernel");
}

void op_mark(MatDevice *base, int phase) {
    Locked L(base);
    CudaDevice *d = L.d;
    if (!L.ok() || d->n_marks >= MAX_MARKS) return;
    if (d->n_marks == d->n_events && !check(d, cudaEventCreate(&d->marks[d->n_events]), "creating an event")) return;
    if (d->n_marks == d->n_events) d->n_events++;
    d->mark_phase[d->n_marks] = phase;
    check(d, cudaEventRecord(d->marks[d->n_marks++], d->stream), "recording an event");
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

} // namespace

const DevOps layer_ops = {op_alloc, op_release, op_put, op_copy, op_get, op_keep, op_holds, op_mul, op_mul_heads, op_tmul_heads,
                          op_rmsnorm, op_attnres, op_add, op_gate, op_situ, op_kda, op_mla, op_route, op_experts,
                          op_combine, op_mark, op_phase_times};

} // namespace dfcuda

/* gemm_cuda.cu - the layer pass's products of many rows on the tensor cores (gemm_cuda.h): X split
 * into three BF16 parts, MXFP4 weights expanded to BF16, cuBLAS GEMMs with fp32 accumulation. The
 * handle and the scratch belong to the process's one CUDA device and are used under its lock. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>

#include "kernels/cuda/gemm_cuda.h"

namespace dfcuda {

namespace {

/* The parts of X of one row tile: 3 x rows x cols BF16, at most this many bytes. */
constexpr size_t PARTS_BYTES = 384ull << 20;
constexpr size_t WORKSPACE_BYTES = 32ull << 20;

struct Gemm {
    cublasHandle_t blas = nullptr;
    void *workspace = nullptr;
    size_t workspace_cap = 0;
    void *parts = nullptr, *weights = nullptr; /* X's BF16 parts; an expanded weight */
    size_t parts_cap = 0, weights_cap = 0;
} G;

__constant__ float e2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* 2^(s-127) for an E8M0 byte: 0 the subnormal 2^-127, 255 NaN (as the CPU's table). */
__device__ inline float e8m0(unsigned s) {
    const unsigned bits = s == 0 ? 0x00400000u : s == 255 ? 0x7fc00000u : s << 23;
    return __uint_as_float(bits);
}

/* x = h + m + l: each part the BF16 rounding of what the parts before it left (exact differences:
 * a part is within a factor of two of what it rounds). Rows of X are ldx floats apart. */
__global__ void split_kernel(const float *X, size_t ldx, int cols, size_t n, __nv_bfloat16 *h, __nv_bfloat16 *m,
                             __nv_bfloat16 *l) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = X[(i / (size_t)cols) * ldx + i % (size_t)cols];
    const __nv_bfloat16 a = __float2bfloat16_rn(x);
    const float r = x - __bfloat162float(a);
    const __nv_bfloat16 b = __float2bfloat16_rn(r);
    h[i] = a, m[i] = b, l[i] = __float2bfloat16_rn(r - __bfloat162float(b));
}

/* An MXFP4 matrix [rows][cols] into BF16, exactly (E2M1 x 2^k has at most two significant bits). */
__global__ void mxfp4_bf16_kernel(const uint8_t *packed, const uint8_t *scales, int cols, size_t bytes,
                                  __nv_bfloat16 *out) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; /* one packed byte: two columns */
    if (i >= bytes) return;
    const size_t half = (size_t)cols / 2, r = i / half, c = 2 * (i % half);
    const float s = e8m0(scales[r * ((size_t)cols / 32) + c / 32]);
    const uint8_t b = packed[i];
    out[r * cols + c] = __float2bfloat16_rn(e2m1[b & 15] * s);
    out[r * cols + c + 1] = __float2bfloat16_rn(e2m1[b >> 4] * s);
}

unsigned grid_of(size_t n) { return (unsigned)((n + 255) / 256); }

bool blas_ok(CudaDevice *d, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (!d->faulted) snprintf(d->fault_msg, sizeof d->fault_msg, "cuda: cuBLAS %s failed (status %d)", what, (int)s);
    d->faulted = true;
    return false;
}

/* The handle on the compute stream, with a workspace of our own (no allocation behind our back). */
bool ready(CudaDevice *d) {
    if (G.blas) return true;
    if (!blas_ok(d, cublasCreate(&G.blas), "cublasCreate")) return false;
    if (!reserve(d, &G.workspace, &G.workspace_cap, WORKSPACE_BYTES))
        return check(d, cudaErrorMemoryAllocation, "the tensor cores' workspace");
    return blas_ok(d, cublasSetStream(G.blas, d->stream), "cublasSetStream") &&
           blas_ok(d, cublasSetWorkspace(G.blas, G.workspace, G.workspace_cap), "cublasSetWorkspace");
}

bool plain(const MulJob &j) {
    return j.sp.row0 == 0 && j.sp.n == j.w.rows && j.sp.x_t == (size_t)j.w.cols && j.sp.y_t == (size_t)j.w.rows;
}

/* One job: its weights as BF16, then row tiles of X split and multiplied three times (l, m, h). */
void gemm_job(CudaDevice *d, const MulJob &j, int T) {
    const int N = j.w.rows, K = j.w.cols;
    const __nv_bfloat16 *W = (const __nv_bfloat16 *)j.w.data;
    if (j.w.fmt == WF_MXFP4) {
        const size_t bytes = (size_t)N * K / 2;
        if (!reserve(d, &G.weights, &G.weights_cap, sizeof(__nv_bfloat16) * (size_t)N * K)) {
            check(d, cudaErrorMemoryAllocation, "the tensor cores' weight scratch");
            return;
        }
        const uint8_t *packed = (const uint8_t *)j.w.data, *scales = (const uint8_t *)j.w.aux;
        mxfp4_bf16_kernel<<<grid_of(bytes), 256, 0, d->stream>>>(packed, scales, K, bytes, (__nv_bfloat16 *)G.weights);
        if (!check(d, cudaGetLastError(), "MXFP4 to BF16 kernel")) return;
        W = (const __nv_bfloat16 *)G.weights;
    }
    size_t rows = PARTS_BYTES / (3 * sizeof(__nv_bfloat16) * (size_t)K);
    if (rows > (size_t)T) rows = (size_t)T;
    if (rows < 1) rows = 1;
    if (!reserve(d, &G.parts, &G.parts_cap, 3 * sizeof(__nv_bfloat16) * rows * K)) {
        check(d, cudaErrorMemoryAllocation, "the tensor cores' activation scratch");
        return;
    }
    __nv_bfloat16 *h = (__nv_bfloat16 *)G.parts, *m = h + rows * K, *l = m + rows * K;
    const float one = 1.0f, zero = 0.0f;
    for (size_t t0 = 0, n; t0 < (size_t)T; t0 += n) {
        n = (size_t)T - t0 < rows ? (size_t)T - t0 : rows;
        split_kernel<<<grid_of(n * K), 256, 0, d->stream>>>(j.X + t0 * j.sp.x_t, j.sp.x_t, K, n * K, h, m, l);
        if (!check(d, cudaGetLastError(), "split kernel")) return;
        float *Y = j.Y + t0 * j.sp.y_t;
        const __nv_bfloat16 *part[3] = {l, m, h}; /* the smallest first */
        for (int p = 0; p < 3; p++)
            if (!blas_ok(d, cublasGemmEx(G.blas, CUBLAS_OP_T, CUBLAS_OP_N, N, (int)n, K, &one, W, CUDA_R_16BF, K, part[p],
                                         CUDA_R_16BF, K, p ? &one : &zero, Y, CUDA_R_32F, (int)j.sp.y_t,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "GEMM"))
                return;
    }
}

} // namespace

bool gemm_takes(const CudaDevice *d, const MulJob *jobs, int n, int heads, int T) {
    if (!d->base.tensor_cores || heads != 1 || T < GEMM_MIN_T) return false;
    for (int i = 0; i < n; i++)
        if ((jobs[i].w.fmt != WF_BF16 && jobs[i].w.fmt != WF_MXFP4) || !plain(jobs[i])) return false;
    return true;
}

void gemm_launch(CudaDevice *d, const MulJob *jobs, int n, int T) {
    if (d->faulted || !ready(d)) return;
    for (int i = 0; i < n && !d->faulted; i++) gemm_job(d, jobs[i], T);
}

void layer_products(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, bool tmul) {
    if (!tmul && gemm_takes(d, jobs, n, heads, T)) gemm_launch(d, jobs, n, T);
    else launch_products(d, jobs, n, heads, T, tmul);
}

void gemm_close(CudaDevice *d) {
    (void)d;
    if (G.blas) cublasDestroy(G.blas);
    cudaFree(G.workspace), cudaFree(G.parts), cudaFree(G.weights);
    G = Gemm();
}

} // namespace dfcuda

/* gemm_cuda.h - the layer pass's products of many rows on the tensor cores (C++, internal to
 * src/kernels/cuda/).
 *
 * A prefill window's products (at least GEMM_MIN_T rows of X) run as cuBLAS BF16 GEMMs with fp32
 * accumulation. The weights are exact in BF16: BF16 weights are BF16; an MXFP4 weight E2M1 x 2^k
 * has at most two significant bits (expanded by a kernel into a BF16 scratch). X, fp32, is carried
 * as three BF16 parts x = h + m + l, each the rounding of what the parts before it left: together
 * they hold x's 24 significant bits, so W.x = W.l + W.m + W.h (summed in that order, each GEMM
 * accumulating in fp32) differs from the fp32 product by accumulation rounding alone, of the size
 * the fp32 kernels' own has, in another order: within the fp64 reference's tolerance, not
 * bit-identical to the CPU (docs/MODEL.md, "Numerics"). Deterministic for a given GPU and cuBLAS.
 *
 * Only the layer pass uses it (K3_DEV_TENSOR_CORES, MatDevice.tensor_cores): K3_DEV_PASS=products
 * keeps the CUDA-core kernels, bit-identical to the CPU. */
#ifndef DF_GEMM_CUDA_H
#define DF_GEMM_CUDA_H

#include "kernels/cuda/cuda_dev.h"

namespace dfcuda {

constexpr int GEMM_MIN_T = 48;

/* Whether the tensor cores take these jobs: plain products (one head, dense rows), at least
 * GEMM_MIN_T rows, BF16 or MXFP4 weights, the device's tensor_cores on. */
bool gemm_takes(const CudaDevice *d, const MulJob *jobs, int n, int heads, int T);
/* Each job's Y = X . W^T on the tensor cores, queued on the compute stream. Caller holds d->mu. */
void gemm_launch(CudaDevice *d, const MulJob *jobs, int n, int T);
/* The layer pass's products: the tensor cores when they take the jobs, else launch_products. */
void layer_products(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, bool tmul);
/* Gives back the cuBLAS handle and the scratch (cuda_close). */
void gemm_close(CudaDevice *d);

} // namespace dfcuda

#endif

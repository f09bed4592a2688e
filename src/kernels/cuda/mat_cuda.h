/* mat_cuda.h - the CUDA device (device.h): matrix products on an NVIDIA GPU, bit-identical to the
 * CPU kernels. Compiled only into the CUDA build (DF_CUDA). */
#ifndef DF_MAT_CUDA_H
#define DF_MAT_CUDA_H

#include "kernels/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device answers (for K3_DEV=auto). */
int cuda_device_available(void);
/* Opens GPU 0: a stream, scratch buffers and the residency table. */
int cuda_device_open(MatDevice **out);

/* The product kernels bench_device compares (prod_cuda.cu): the name of variant v (0: the choice
 * launch_products makes), NULL past the last. */
const char *cuda_variant_name(int v);
/* Times variant v on n products of one shape (W[i] kept on the device) with the same T rows of X:
 * rounds of reps launches queued back to back, timed by device events; *secs is the median round's
 * time per launch, Y ([n][T][rows]) the outputs. 0; 1 when the variant does not take these
 * products; -1 with a message. */
int cuda_time_variant(MatDevice *dev, int v, const Mat *const *W, int n, const float *X, int T, int reps, int rounds,
                      float *Y, double *secs);

#ifdef __cplusplus
}
#endif

#endif

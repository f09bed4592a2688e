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

#ifdef __cplusplus
}
#endif

#endif

/* device.c - choosing the compute device (device.h). The accelerator itself lives in
 * kernels/cuda/ and is compiled only into the CUDA build (make cuda, which defines DF_CUDA). */
#include "kernels/device.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#ifdef DF_CUDA
#include "kernels/cuda/mat_cuda.h"
#endif

static MatDevice *current; /* the process's device: NULL = the CPU kernels */

MatDevice *device_current(void) { return current; }

const char *device_fault(void) { return current && current->fault ? current->fault(current) : NULL; }

int device_resolve(DeviceKind want, DeviceKind *kind) {
    if (want == DEV_AUTO) {
#ifdef DF_CUDA
        *kind = cuda_device_available() ? DEV_CUDA : DEV_CPU;
#else
        *kind = DEV_CPU;
#endif
        return 0;
    }
    if (want == DEV_CPU) return *kind = DEV_CPU, 0;
#ifdef DF_CUDA
    *kind = DEV_CUDA;
    return 0;
#else
    return df_fail("K3_DEV=cuda: this deltafin was built without the CUDA backend (build it with `make cuda`, "
                   "which needs nvcc)");
#endif
}

int device_open(DeviceKind kind) {
    if (kind == DEV_CPU || current) return 0;
#ifdef DF_CUDA
    return cuda_device_open(&current);
#else
    return df_fail("K3_DEV=cuda: this build has no CUDA backend");
#endif
}

int device_install(MatDevice *d) {
    if (current) return df_fail("a device is open already (%s)", current->desc);
    current = d;
    return 0;
}

void device_close(void) {
    if (current) current->close(current);
    current = NULL;
}

/* device.h - where matrix products run: the CPU kernels, or an accelerator that takes them over
 * (K3_DEV). This is the seam a GPU backend slots into: model code calls the products of mat.h and
 * never knows.
 *
 * The device is process-wide state, chosen once at start-up (device_open) before any forward and
 * released when the engine closes (device_close); the products read it. A device computes exactly
 * what the CPU kernels compute: the same weight expansion and the same reduction order
 * (kernels_impl.h), so logits are bit-identical on every device, and results stay independent of
 * thread counts.
 *
 * A device may keep copies of weights in its own memory under their residency keys (mat.h): a
 * key names one version of a matrix's bytes, and the stores change a key's generation whenever
 * those bytes change (a streamed spine layer read again, an expert cache slot refilled), so a copy
 * kept under a key is never stale. Matrices without a key are copied for each use. */
#ifndef DF_DEVICE_H
#define DF_DEVICE_H

#include <stddef.h>

#include "kernels/mat.h"

typedef struct MatDevice MatDevice;
struct MatDevice {
    char desc[192];   /* for the start-up line, e.g. "cuda (NVIDIA H200, 139.8 GB)" */
    /* The products of mat.h (pool: for the CPU kernels, which the device may fall back to when it
     * cannot hold a weight). After a device fault they write zeros. */
    void (*mul)(MatDevice *d, Pool *pool, float *Y, const Mat *W, const float *X, int T);
    void (*mul_heads)(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
    void (*tmul_heads)(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
    /* NULL, or the message of the device's first fault (a failed copy, launch or sync): from then
     * on it computes nothing, and every forward reports the fault (device_fault). */
    const char *(*fault)(MatDevice *d);
    /* Bytes of weights it holds resident, and bytes it copied for single uses, so far. */
    void (*counters)(MatDevice *d, size_t *resident, size_t *streamed);
    void (*close)(MatDevice *d);
    /* Host memory that a store fills again and again and hands out matrices from (the expert
     * cache, the spine's stream buffers), or a mapping whose experts are copied at every use: the
     * device may page-lock it for faster copies (best effort: a refusal only costs speed; NULL: it
     * never does). It must stay allocated until the device closes. */
    void (*host_buffer)(MatDevice *d, void *p, size_t bytes);
    size_t spine_bytes;   /* device memory to leave for the spine when experts stay resident */
    size_t state_bytes;   /* device memory to leave for the decode States' copies (the layer pass's) */
    size_t expert_bytes;  /* device memory experts may take at most (SIZE_MAX: all the room there is) */
    size_t weight_room;   /* device memory it may give to weights, activations and states, set at open */
    int graphs;           /* devops.h record: 1 runs recordings as CUDA graphs, 0 launches one by one */
    int tensor_cores;     /* the layer pass's products of many rows on the tensor cores (BF16 GEMMs of X in
                           * three parts: within the reference's tolerance); 0: every product on the
                           * CUDA cores */
    int host_memory;      /* its memory is the host's (the CPU device): a State's arrays serve as its
                           * copy of them, nothing is copied between the two */
    /* Whole-layer operations on device memory (devops.h), or NULL: the model then runs its layers
     * on the CPU device (kernels/cpu/cpu_device.h), whose products come here. */
    const struct DevOps *ops;
};

/* K3_DEV: DEV_AUTO (cuda when this build has the CUDA backend and a usable GPU answers, else cpu),
 * DEV_CPU or DEV_CUDA. A named device is what the caller asked for: it then refuses what the
 * device cannot do instead of falling back. */
typedef enum { DEV_AUTO, DEV_CPU, DEV_CUDA } DeviceKind;
/* K3_DEV_PASS: what an accelerator with whole-layer operations (devops.h) runs of a decode step:
 * every layer (PASS_LAYERS), or only the matrix products, bit-identical to the CPU (PASS_PRODUCTS). */
typedef enum { PASS_LAYERS, PASS_PRODUCTS } DevicePass;

/* The device a choice means here: *kind is DEV_CPU or DEV_CUDA. Fails, saying why, when DEV_CUDA
 * is asked of a build without the CUDA backend. */
int device_resolve(DeviceKind want, DeviceKind *kind);
/* Opens the device (DEV_CPU or DEV_CUDA) and makes mat_mul use it (nothing to open for DEV_CPU,
 * nothing again when one is open). */
int device_open(DeviceKind kind);
/* Makes d, a device implemented by the caller, the process's device (until device_close, which
 * calls d->close). Fails when a device is open already. */
int device_install(MatDevice *d);
/* The open accelerator, or NULL on the CPU. */
MatDevice *device_current(void);
/* The open accelerator's fault message, or NULL (no fault, or the CPU). */
const char *device_fault(void);
void device_close(void);

#endif

/* device.h - where matrix products run: the CPU kernels, or an accelerator that takes them over
 * (K3_DEV). This is the seam a GPU backend slots into: model code calls mat_mul and never knows.
 *
 * The device is process-wide state, chosen once at start-up (device_open) before any forward and
 * released when the engine closes (device_close); mat_mul reads it. A device computes exactly what the CPU
 * kernels compute: the same weight expansion and the same reduction order (kernels_impl.h), so
 * logits are bit-identical on every device, and results stay independent of thread counts.
 *
 * A device may keep copies of weights in its own memory, keyed by where their bytes live on the
 * host: the caller promises that a matrix's host bytes do not change while the device is open
 * unless the matrix's format is MXFP4 (routed experts), and may widen the promise to MXFP4 too
 * (stable_experts: the mapped store, whose expert spans are the shards' own pages). The streaming
 * store's expert cache is described by expert_cache, and every refill of one of its slots is
 * announced by slot_refilled before the slot's bytes change, so copies of the experts in it may
 * stay too. The engine keeps the spine's side of the promise by refusing a streamed spine. */
#ifndef DF_DEVICE_H
#define DF_DEVICE_H

#include <stddef.h>

#include "kernels/mat.h"

typedef struct MatDevice MatDevice;
struct MatDevice {
    char desc[192];   /* for the start-up line, e.g. "cuda (NVIDIA H200, 139.8 GB)" */
    /* Y[T][rows] = X[T][cols] . W^T, as mat_mul (pool: for the CPU kernels, which the device may
     * fall back to when it cannot hold a weight). After a device fault it writes zeros. */
    void (*mul)(MatDevice *d, Pool *pool, float *Y, const Mat *W, const float *X, int T);
    /* NULL, or the message of the device's first fault (a failed copy, launch or sync): from then
     * on it computes nothing, and every forward reports the fault (device_fault). */
    const char *(*fault)(MatDevice *d);
    /* Bytes of weights it holds resident, and bytes it copied for single uses, so far. */
    void (*counters)(MatDevice *d, size_t *resident, size_t *streamed);
    void (*close)(MatDevice *d);
    /* The streaming store's expert cache: n_slots slots of slot_bytes from arena. The device may
     * lock the memory for fast copies (best effort: failure only costs speed) and keep copies of
     * the experts in it until slot_refilled(slot) says that slot is about to be overwritten. */
    void (*expert_cache)(MatDevice *d, void *arena, size_t slot_bytes, int n_slots);
    void (*slot_refilled)(MatDevice *d, int slot);
    int stable_experts;   /* MXFP4 host bytes never change either: they may stay resident too */
    size_t spine_bytes;   /* device memory to leave for the spine when experts stay resident */
};

/* K3_DEV: DEV_AUTO (cuda when this build has the CUDA backend and a usable GPU answers, else cpu),
 * DEV_CPU or DEV_CUDA. A named device is what the caller asked for: it then refuses what the
 * device cannot do instead of falling back. */
typedef enum { DEV_AUTO, DEV_CPU, DEV_CUDA } DeviceKind;

/* The device a choice means here: *kind is DEV_CPU or DEV_CUDA. Fails, saying why, when DEV_CUDA
 * is asked of a build without the CUDA backend. */
int device_resolve(DeviceKind want, DeviceKind *kind);
/* Opens the device (DEV_CPU or DEV_CUDA) and makes mat_mul use it (nothing to open for DEV_CPU,
 * nothing again when one is open). */
int device_open(DeviceKind kind);
/* The open accelerator, or NULL on the CPU. */
MatDevice *device_current(void);
/* The open accelerator's fault message, or NULL (no fault, or the CPU). */
const char *device_fault(void);
void device_close(void);

#endif

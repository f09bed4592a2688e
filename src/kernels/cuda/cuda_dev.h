/* cuda_dev.h - what the CUDA device's two files share (C++, internal to src/kernels/cuda/): the
 * device's state, its residency table and the matrix-product launcher. mat_cuda.cu implements
 * the products of device.h and the residency of weights; layer_cuda.cu the whole-layer operations
 * of devops.h, which run on device memory and launch the same product kernel. */
#ifndef DF_CUDA_DEV_H
#define DF_CUDA_DEV_H

#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/device.h"
#include "kernels/devops.h"

namespace dfcuda {

/* A weight matrix as the kernels read it: device pointers. */
struct DevMat {
    int fmt, rows, cols;
    const void *data, *aux;
};

/* Which weight rows, inputs and outputs a product covers. Row r < n of head h (blockIdx.y) is weight
 * row row0 + h * stride + r; head h's input of X row t starts at X + t * x_t + h * x_h; the output
 * of mul is Y[t * y_t + h * n + r], of tmul Y[(t * heads + h) * cols + i]. A plain product is one
 * head of all the rows. */
struct Span {
    int row0, stride, n;
    size_t x_t, x_h, y_t;
};

/* One product of a batch launched together (the experts of a layer): weights, span, input, output. */
struct MulJob {
    DevMat w;
    Span sp;
    const float *X;
    float *Y;
};

constexpr int MAX_BATCH = 32; /* products in one launch: a layer's experts, gate and up, 16 at a time */

struct Resident {
    MatKey key;       /* the item and part it holds (store 0: a free entry), and the generation copied */
    int fmt, rows, cols, expert;
    void *dev;        /* data, then aux (16-byte aligned) */
    size_t bytes;
};

constexpr int MAX_HOST_BUFFERS = 1024; /* a mapped store's shards among them */
constexpr int MAX_MARKS = 4096; /* phase marks of one forward (devops.h mark) */

struct CudaDevice {
    MatDevice base; /* first member: device.h's callers see this */
    pthread_mutex_t mu;
    cudaStream_t stream;
    Resident *table;          /* open addressing on (store, part, item); cap is a power of two */
    size_t cap, used;
    size_t budget, resident, streamed;
    size_t experts_resident;  /* of resident: MXFP4 */
    size_t allocated;         /* device memory handed out by devops alloc (taken from the budget) */
    float *x, *y;             /* activation scratch of the products of device.h */
    size_t x_cap, y_cap;
    uint8_t *stage;           /* weights of a single use */
    size_t stage_cap;
    uint8_t *batch_stage;     /* weights of a batch's single uses (non-resident experts) */
    size_t batch_stage_cap;
    void *locked[MAX_HOST_BUFFERS]; /* host buffers page-locked (host_buffer) */
    int n_locked;
    cudaEvent_t marks[MAX_MARKS];   /* recorded by devops mark, read by devops phase_times */
    int mark_phase[MAX_MARKS];
    int n_marks, n_events;
    bool uploaded;            /* weights were copied from host memory since the last wait */
    bool faulted;             /* a CUDA call failed: nothing more is computed (base.fault) */
    char fault_msg[256];
};

/* Records the first failed CUDA call; returns whether e is a success. */
bool check(CudaDevice *d, cudaError_t e, const char *what);
/* Bytes of a matrix's data and of its aux array (scales), by format. */
void mat_sizes(const Mat *W, size_t *data, size_t *aux);
/* W's copy kept on the device (refreshed when the key's generation moved on, copied now if new and
 * it may stay), or NULL. Caller holds d->mu. */
const uint8_t *kept_weights(CudaDevice *d, const Mat *W);
/* Whether W has a current copy on the device (nothing copied). Caller holds d->mu. */
bool holds_weights(CudaDevice *d, const Mat *W);
/* Grows a device buffer to at least n bytes (its old content is not kept); false when the device
 * has no room. */
bool reserve(CudaDevice *d, void **buf, size_t *cap, size_t n);
/* Where W's bytes are on the device: its kept copy (refreshed when the key's generation moved on,
 * copied now if new and it may stay), or staged at stage_at (NULL: the single-use buffer). NULL
 * when the device cannot hold it at all. Caller holds d->mu. */
const uint8_t *device_weights(CudaDevice *d, const Mat *W, uint8_t *stage_at);
/* W as the kernels read it, at dw (device_weights). */
DevMat dev_mat(const Mat *W, const uint8_t *dw);
/* Device bytes W takes (data, aux at the next 16-byte boundary). */
size_t dev_bytes(const Mat *W);
/* Launches jobs[0..n) (n <= MAX_BATCH) as one grid over X rows [0, T): Y = W . X per job, or the
 * transposed per-head product when tmul (n = 1, heads > 1). */
void launch_products(CudaDevice *d, const MulJob *jobs, int n, int heads, int T, bool tmul);

/* The whole-layer operations (layer_cuda.cu). */
extern const DevOps layer_ops;

} // namespace dfcuda

#endif

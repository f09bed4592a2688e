/* cuda_dev.h - what the CUDA device's files share (C++, internal to src/kernels/cuda/): the
 * device's state, its residency table and the matrix-product launcher. mat_cuda.cu implements
 * the products of device.h and the residency of weights; prod_cuda.cu the product kernels and
 * their launcher; layer_cuda.cu the whole-layer operations of devops.h, which run on device memory
 * and launch the same product kernels; slots_cuda.cu the expert slots of the model's expert cache
 * and their copies on the copy stream. */
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
    bool in_slot;     /* dev points into expert slot `slot` (not owned: never refreshed or freed) */
    int slot;
};

/* The expert slots (devops.h expert_slots): one allocation of n slots of slot_bytes, each the three
 * matrices of an expert at part_off[p], shaped shape[p] (laid out by the first fill). */
struct ExpertSlots {
    uint8_t *mem;
    int n;
    size_t slot_bytes, part_off[3];
    bool laid_out;
    int shape[3][3];          /* fmt, rows, cols of each part */
    MatKey (*keys)[3];        /* [n] the residency keys each slot was filled under (store 0: none) */
    uint8_t *pending;         /* [n] filled since the compute stream last waited for the fills */
    int *pending_list, n_pending;
};

constexpr int MAX_HOST_BUFFERS = 1024; /* a mapped store's shards among them */
constexpr int MAX_MARKS = 4096; /* phase marks of one forward (devops.h mark) */
constexpr int MAX_GRAPHS = 1024; /* recordings of one forward (devops.h record): one per MoE layer, one more */

struct CudaDevice {
    MatDevice base; /* first member: device.h's callers see this */
    pthread_mutex_t mu;
    cudaStream_t stream;      /* the compute stream: every operation, in order */
    cudaStream_t copy_stream; /* fills of expert slots, beside it */
    cudaEvent_t fills_done;   /* recorded on copy_stream when the compute stream must wait for fills */
    cudaEvent_t slots_read;   /* recorded on stream after a launch that read expert slots */
    bool slot_read;           /* a launch being prepared reads expert slots */
    ExpertSlots slots;
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
    cudaGraphExec_t graphs[MAX_GRAPHS]; /* built from each key's recording, updated by the next (NULL: none yet) */
    int recording;            /* key + 1 of the recording in progress (stream capture), 0: none */
    bool uploaded;            /* weights were copied from host memory since the last wait */
    bool faulted;             /* a CUDA call failed: nothing more is computed (base.fault) */
    char fault_msg[256];
};

/* Records the first failed CUDA call; returns whether e is a success. */
bool check(CudaDevice *d, cudaError_t e, const char *what);
/* Bytes of a matrix's data and of its aux array (scales), by format. */
void mat_sizes(const Mat *W, size_t *data, size_t *aux);
/* Queues the copy of W's bytes from host memory to dst (device) on stream st: data, then aux at the
 * next 16-byte boundary (the layout dev_mat reads). */
void copy_weights(CudaDevice *d, cudaStream_t st, uint8_t *dst, const Mat *W);
/* W's copy kept on the device (refreshed when the key's generation moved on, copied now if new and
 * it may stay), or NULL. Caller holds d->mu. */
const uint8_t *kept_weights(CudaDevice *d, const Mat *W);
/* Whether W has a current copy on the device (nothing copied). Caller holds d->mu. */
bool holds_weights(CudaDevice *d, const Mat *W);
/* The residency table (mat_cuda.cu): key's entry, or the free entry where it would go; makes room
 * for one more entry first; removes an entry (freeing an owned copy). Caller holds d->mu. */
Resident *lookup(CudaDevice *d, const MatKey &k);
void table_room(CudaDevice *d);
void remove_entry(CudaDevice *d, Resident *r);
/* Expert slots (slots_cuda.cu). Caller holds d->mu. slot_memory: where slot s holds the matrix W (its
 * part of the expert), after making the compute stream wait for the slot's fill; NULL (a fault) when
 * W is not shaped like the slots. slot_ready: that wait alone. slots_read_done: after queueing
 * launches that read slots (the copy stream's next fill waits for them). slots_free: gives the
 * slots back. */
const uint8_t *slot_memory(CudaDevice *d, int s, const Mat *W, int part);
void slot_ready(CudaDevice *d, int s);
void slots_read_done(CudaDevice *d);
void slots_free(CudaDevice *d);
int op_expert_slots(MatDevice *base, size_t expert_bytes, int want);
void op_slot_fill(MatDevice *base, int s, const Mat *w1, const Mat *w2, const Mat *w3);
int op_fills_wait(MatDevice *base);
/* Ends the recording in progress (devops.h record), if any, and runs it as one graph: the key's
 * graph updated in place when its launches are those of the last recording, else built anew; after
 * a fault, drops it. Caller holds d->mu. */
void run_recording(CudaDevice *d);
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

/* Each operation of devops.h: the device, locked, skipped after a fault. */
struct Locked {
    CudaDevice *d;
    explicit Locked(MatDevice *base) : d((CudaDevice *)base) { pthread_mutex_lock(&d->mu); }
    ~Locked() { pthread_mutex_unlock(&d->mu); }
    bool ok() const { return !d->faulted; }
    bool launched(const char *what) { return check(d, cudaGetLastError(), what); }
};

/* The whole-layer operations (layer_cuda.cu). */
extern const DevOps layer_ops;

} // namespace dfcuda

#endif

/* mat_cuda.cu - the CUDA device (device.h): matrix products on GPU 0 in the CPU kernels' order.
 *
 * THE ORDER. Every output y[t][r] is the CPU's (kernels_impl.h): 16 lanes, lane l accumulating
 * columns l, l+16, l+32, ... of the row (zero-padded to a multiple of 16) with one fused
 * multiply-add each from +0, the lanes summed by the fixed tree 8, 4, 2, 1 apart; each weight
 * expanded exactly (BF16 by a shift, I8ROW by one fp32 product q * scale, MXFP4 as E2M1 times
 * 2^(scale-127)); explicit __fmaf_rn/__fmul_rn/__fadd_rn and --fmad=false, so nothing is fused or
 * reassociated. Kernels differ only in which thread holds which lanes and when the bytes arrive;
 * a lane's chain is never split, so every kernel gives the same bits.
 *
 * THE KERNELS (prod_cuda.cu; launch_products picks by shape, as measured on an H200 with
 * bench_device, docs/PERFORMANCE.md "Kernel rates"):
 *  - streaming kernel, most products: a thread holds the lanes of one weight row (8 for BF16,
 *    from 16-byte chunks that are half a 16-column group; 16 for I8ROW, a group per chunk; 16 for
 *    MXFP4, two groups per chunk, each 4-byte word the 8 columns of one half) for a tile of up to
 *    4 X rows, so each weight is loaded and expanded once for all of them; the row's other tiles
 *    are threads of the same warp, whose identical loads are one memory request. Chunks come in
 *    blocks of U, the next block loading while the current one is multiplied (two register
 *    buffers); X is read through the read-only cache, or from shared memory when the block copies
 *    it there first (T = 1: every row of a block reads the same X). Loads may ask L2 for the 256
 *    bytes around them (a row is read front to back). MXFP4 is decoded in registers: a code's sign
 *    to bit 15 and its three magnitude bits to bits 9..11 of an fp16 is E2M1 * 2^-14 exactly (zero
 *    and the subnormal 0.5 too: E2M1's exponent and mantissa bits line up with fp16's), four codes
 *    per byte permute; for scale bytes 104..128 one fp16 multiply per pair by 2^(s-113) is exact
 *    (the product is an fp16 number, normal or subnormal), then each is widened to fp32; for other
 *    scale bytes the widened value is multiplied in fp32 by 2^(s-113) (split in two above 240;
 *    255 gives NaN), exact as well. The warp votes per block of chunks for the cheapest exact
 *    path. I8ROW bytes become (float)q exactly as 2^23 + 128 + q less 2^23 + 128.
 *  - coop kernel, T = 1 with one head and rows of whole 256-byte segments, more than 2048 rows
 *    for BF16 (decode of the spine's large products and of a layer's experts): the streaming
 *    kernel's walk (a thread per weight row, BF16 two), but the bytes come through shared memory:
 *    each warp copies its rows' next segment (128 or 256 bytes of each row) with cp.async, 16
 *    bytes a lane so one load instruction covers whole row segments, two or four stages ahead;
 *    a warp's 16-byte reads fall on distinct banks (BF16 and MXFP4 chunks placed by an xor of
 *    the row, I8ROW rows 16 bytes of padding apart: prod_cuda.cu's coop_pitch);
 *    X is copied to shared memory once per block of 2-4 warps.
 *  - coop tile kernel, 2 to 16 X rows (prefill chunks, verify passes) on what the coop kernel
 *    takes: the coop kernel's warps, stages and walk over a tile of X rows (8 for BF16, 4 for the
 *    others; several launches past a tile), each weight expanded once for the tile; the block
 *    also copies each segment's columns of the tile's X rows into a stage of its own, so X is read
 *    from shared memory, and its warps move through the segments together (a barrier after the
 *    copies land, another before a stage is refilled).
 *  - staged kernel, products of at most 1024 output rows, BF16/I8ROW of at most 2048 rows with
 *    several X rows, and BF16/I8ROW with more than 12 X rows the coop tile kernel does not take: a
 *    block copies its weight rows, and X where it fits, into shared memory with every copy in
 *    flight at once, then each half warp walks one (row, X row) output, lane l its columns.
 *  - BF16 decode kernel (T = 1, one head, 1025 to 2048 rows, or shapes the coop kernel does not
 *    take): four threads per row, 8-byte loads, blocks of one warp.
 *  - generic kernel, what the others do not take (F32 weights; rows, X rows or heads not on
 *    16-byte boundaries; columns not a multiple of 16, 32 for MXFP4): a half warp per output,
 *    lane l its columns, a weight row walked once per tile of 4 X rows.
 *  - the transposed per-head product (mat_tmul_heads): one thread per output column adds the
 *    products of its column in row order, one rounded product then one sum per term, as the CPU.
 * NaN results are NaN on both sides but their payloads may differ (the GPU returns its canonical
 * NaN; the CPU's SIMD paths propagate an operand's).
 *
 * Weights are copied to device memory at first use and stay there under their residency key
 * (mat.h) while the memory budget lasts, experts leaving room for the spine. A key seen again with
 * a new generation (a streamed spine layer read again, an expert slot refilled) means new bytes:
 * the copy is refreshed in place. Past the budget, and for matrices without a key, the bytes are
 * copied for the one product, and where even that does not fit, the product runs on the CPU. The
 * buffers a store refills (the expert cache, the spine's stream buffers) are page-locked for fast
 * copies when the driver allows. Activations go up and results come back on every call, on one
 * stream, under a mutex (products may be called from any thread). While the model runs an expert
 * cache (slots_cuda.cu), the slots' contents are entered here under the keys they were filled from,
 * so products find them too; such entries point into the slots and are dropped, never refreshed,
 * when their key comes back with another generation. */
#include "kernels/cuda/mat_cuda.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/gemm_cuda.h"
#include "util/err.h"

namespace dfcuda {

constexpr size_t RESERVE = 2ull << 30; /* device memory left for scratch and the runtime */

void mat_sizes(const Mat *W, size_t *data, size_t *aux) {
    const size_t n = (size_t)W->rows * (size_t)W->cols;
    switch (W->fmt) {
    case WF_BF16: *data = 2 * n, *aux = 0; break;
    case WF_F32: *data = 4 * n, *aux = 0; break;
    case WF_I8ROW: *data = n, *aux = 4 * (size_t)W->rows; break;
    case WF_MXFP4: *data = n / 2, *aux = n / 32; break;
    }
}

bool check(CudaDevice *d, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    if (!d->faulted)
        snprintf(d->fault_msg, sizeof d->fault_msg, "cuda: %s failed: %s", what, cudaGetErrorString(e));
    d->faulted = true;
    return false;
}

/* Grows a device buffer to at least n bytes (its old content is not kept). Returns false when
 * the device has no room (the buffer is then empty). */
bool reserve(CudaDevice *d, void **buf, size_t *cap, size_t n) {
    if (n <= *cap) return true;
    if (*buf && !check(d, cudaFree(*buf), "cudaFree")) return false;
    *buf = nullptr, *cap = 0;
    if (cudaMalloc(buf, n) != cudaSuccess) {
        cudaGetLastError();
        *buf = nullptr;
        return false;
    }
    *cap = n;
    return true;
}

bool same_item(const MatKey &a, const MatKey &b) { return a.store == b.store && a.part == b.part && a.item == b.item; }

size_t slot_of(const CudaDevice *d, const MatKey &k) {
    uint64_t h = k.item * 0x9E3779B97F4A7C15ull ^ ((uint64_t)k.store << 32 | k.part);
    h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
    return (size_t)h & (d->cap - 1);
}

/* The entry of key's item, or the free entry where it would go. */
Resident *lookup(CudaDevice *d, const MatKey &k) {
    for (size_t i = slot_of(d, k);; i = (i + 1) & (d->cap - 1)) {
        if (!d->table[i].key.store || same_item(d->table[i].key, k)) return &d->table[i];
    }
}

static void grow_table(CudaDevice *d) {
    Resident *old = d->table;
    size_t old_cap = d->cap;
    d->cap = old_cap ? 2 * old_cap : 1024;
    d->table = (Resident *)df_calloc(d->cap, sizeof *d->table);
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key.store) *lookup(d, old[i].key) = old[i];
    free(old);
}

void table_room(CudaDevice *d) {
    if (2 * (d->used + 1) > d->cap) grow_table(d);
}

void copy_weights(CudaDevice *d, cudaStream_t st, uint8_t *dst, const Mat *W) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    check(d, cudaMemcpyAsync(dst, W->data, data, cudaMemcpyHostToDevice, st), "copying weights");
    if (aux) check(d, cudaMemcpyAsync(dst + (data + 15) / 16 * 16, W->aux, aux, cudaMemcpyHostToDevice, st),
                   "copying weight scales");
}

/* W's bytes to dst on the compute stream (settle_uploads waits for them). */
void upload(CudaDevice *d, uint8_t *dst, const Mat *W) {
    d->uploaded = true;
    copy_weights(d, d->stream, dst, W);
}

bool same_shape(const Resident *r, const Mat *W) {
    return r->fmt == (int)W->fmt && r->rows == W->rows && r->cols == W->cols;
}

/* Whether a new copy of W may stay: within the budget, and experts leave room for the spine and the
 * decode States; while
 * the model runs an expert cache in slots, experts are its to keep. */
bool may_keep(const CudaDevice *d, const Mat *W, size_t bytes) {
    if (d->resident + d->allocated + bytes > d->budget) return false;
    if (W->fmt != WF_MXFP4) return true;
    if (d->slots.n > 0) return false;
    if (d->experts_resident + bytes > d->base.expert_bytes) return false;
    size_t spine_left = d->base.spine_bytes > d->resident - d->experts_resident
                            ? d->base.spine_bytes - (d->resident - d->experts_resident)
                            : 0;
    return d->resident + d->allocated + bytes + spine_left + d->base.state_bytes <= d->budget;
}

/* Copies W into a new device allocation that stays, if it may (r filled); false otherwise. */
bool keep_copy(CudaDevice *d, Resident *r, const Mat *W, size_t bytes) {
    void *dev = nullptr;
    if (!may_keep(d, W, bytes) || cudaMalloc(&dev, bytes) != cudaSuccess) {
        cudaGetLastError(); /* a refused allocation: the caller stages it instead */
        return false;
    }
    upload(d, (uint8_t *)dev, W);
    *r = Resident{W->key, (int)W->fmt, W->rows, W->cols, W->fmt == WF_MXFP4, dev, bytes, false, -1};
    d->resident += bytes, d->experts_resident += r->expert ? bytes : 0;
    return true;
}

void drop_copy(CudaDevice *d, Resident *r) {
    if (!r->in_slot) {
        cudaFree(r->dev);
        d->resident -= r->bytes, d->experts_resident -= r->expert ? r->bytes : 0;
    }
    *r = Resident{};
}

/* W copied for this use only, to at (NULL: the single-use buffer). NULL when the device has no
 * room even for that. */
const uint8_t *stage(CudaDevice *d, const Mat *W, size_t bytes, uint8_t *at) {
    if (!at && !reserve(d, (void **)&d->stage, &d->stage_cap, bytes)) return nullptr;
    if (!at) at = d->stage;
    upload(d, at, W);
    d->streamed += bytes;
    return at;
}

/* Removes entry r from the open-addressing table (the entries after it that hash before it move
 * back, so lookups still find them). */
void remove_entry(CudaDevice *d, Resident *r) {
    drop_copy(d, r);
    d->used--;
    size_t hole = (size_t)(r - d->table);
    for (size_t i = (hole + 1) & (d->cap - 1); d->table[i].key.store; i = (i + 1) & (d->cap - 1)) {
        size_t home = slot_of(d, d->table[i].key);
        /* the entry at i may fill the hole if its home is not in (hole, i] cyclically */
        bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        d->table[hole] = d->table[i];
        d->table[i] = Resident{};
        hole = i;
    }
}

size_t dev_bytes(const Mat *W) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    return (data + 15) / 16 * 16 + aux;
}

DevMat dev_mat(const Mat *W, const uint8_t *dw) {
    size_t data = 0, aux = 0;
    mat_sizes(W, &data, &aux);
    return DevMat{(int)W->fmt, W->rows, W->cols, dw, aux ? dw + (data + 15) / 16 * 16 : nullptr};
}

bool holds_weights(CudaDevice *d, const Mat *W) {
    if (!W->key.store || !d->cap) return false;
    const Resident *r = lookup(d, W->key);
    return r->key.store && r->key.gen == W->key.gen && same_shape(r, W) && r->bytes == dev_bytes(W);
}

const uint8_t *kept_weights(CudaDevice *d, const Mat *W) {
    const size_t bytes = dev_bytes(W);
    if (!W->key.store) return nullptr;
    table_room(d);
    Resident *r = lookup(d, W->key);
    if (r->key.store && r->in_slot) { /* an expert slot holds the item: the bytes filled, or older ones */
        if (r->key.gen == W->key.gen && same_shape(r, W) && r->bytes == bytes) {
            slot_ready(d, r->slot);
            d->slot_read = true;
            return (const uint8_t *)r->dev;
        }
        remove_entry(d, r), r = lookup(d, W->key); /* never refreshed in place: the slot is the model's */
    }
    if (r->key.store && same_shape(r, W) && r->bytes == bytes) {
        if (r->key.gen != W->key.gen) { /* new bytes behind the same item: refresh the copy */
            upload(d, (uint8_t *)r->dev, W);
            r->key.gen = W->key.gen;
        }
        return (const uint8_t *)r->dev;
    }
    if (r->key.store) remove_entry(d, r), r = lookup(d, W->key); /* the item changed shape */
    if (keep_copy(d, r, W, bytes)) {
        d->used++;
        return (const uint8_t *)r->dev;
    }
    return nullptr;
}

const uint8_t *device_weights(CudaDevice *d, const Mat *W, uint8_t *stage_at) {
    const uint8_t *kept = kept_weights(d, W);
    if (kept) return kept;
    return stage(d, W, dev_bytes(W), stage_at);
}

enum Op { OP_MUL, OP_MUL_HEADS, OP_TMUL_HEADS };

/* One product of any kind: weights, activations up, the kernel, results down; on the CPU when the
 * device has no room for it; zeros after a fault. */
void run(CudaDevice *d, Op op, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    const int heads = op == OP_MUL ? 1 : hd->heads;
    const size_t x_floats = op == OP_MUL ? (size_t)W->cols : (size_t)heads * (size_t)hd->x_stride;
    const size_t y_floats = op == OP_MUL ? (size_t)W->rows
                          : op == OP_MUL_HEADS ? (size_t)heads * (size_t)hd->n
                                               : (size_t)heads * (size_t)W->cols;
    const size_t xb = sizeof(float) * (size_t)T * x_floats, yb = sizeof(float) * (size_t)T * y_floats;
    Span sp = op == OP_MUL ? Span{0, 0, W->rows, x_floats, 0, y_floats}
                           : Span{hd->row0, hd->stride, hd->n, x_floats, (size_t)hd->x_stride, y_floats};
    pthread_mutex_lock(&d->mu);
    const uint8_t *dw = d->faulted ? nullptr : device_weights(d, W, nullptr);
    const bool room = dw && reserve(d, (void **)&d->x, &d->x_cap, xb) && reserve(d, (void **)&d->y, &d->y_cap, yb);
    if (room && !d->faulted && check(d, cudaMemcpyAsync(d->x, X, xb, cudaMemcpyHostToDevice, d->stream), "copying activations")) {
        MulJob job = {dev_mat(W, dw), sp, d->x, d->y};
        launch_products(d, &job, 1, heads, T, op == OP_TMUL_HEADS);
        (void)(!d->faulted &&
               check(d, cudaMemcpyAsync(Y, d->y, yb, cudaMemcpyDeviceToHost, d->stream), "copying results") &&
               check(d, cudaStreamSynchronize(d->stream), "matmul"));
    }
    const bool faulted = d->faulted;
    pthread_mutex_unlock(&d->mu);
    if (faulted) memset(Y, 0, yb); /* the forward fails (base.fault): its numbers need only be finite */
    else if (!room) { /* no room on the device for this one: the same bits on the CPU */
        if (op == OP_MUL) mat_mul_cpu(pool, Y, W, X, T);
        else if (op == OP_MUL_HEADS) mat_mul_heads_cpu(pool, Y, W, hd, X, T);
        else mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
    }
}

void cuda_mul(MatDevice *base, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    run((CudaDevice *)base, OP_MUL, pool, Y, W, nullptr, X, T);
}

void cuda_mul_heads(MatDevice *base, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    run((CudaDevice *)base, OP_MUL_HEADS, pool, Y, W, hd, X, T);
}

void cuda_tmul_heads(MatDevice *base, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    run((CudaDevice *)base, OP_TMUL_HEADS, pool, Y, W, hd, X, T);
}

const char *cuda_fault(MatDevice *base) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    const char *msg = d->faulted ? d->fault_msg : nullptr;
    pthread_mutex_unlock(&d->mu);
    return msg;
}

void cuda_counters(MatDevice *base, size_t *resident, size_t *streamed) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    *resident = d->resident, *streamed = d->streamed;
    pthread_mutex_unlock(&d->mu);
}

void cuda_host_buffer(MatDevice *base, void *p, size_t bytes) {
    CudaDevice *d = (CudaDevice *)base;
    pthread_mutex_lock(&d->mu);
    if (d->n_locked < MAX_HOST_BUFFERS &&
        (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess ||
         (cudaGetLastError(), cudaHostRegister(p, bytes, cudaHostRegisterReadOnly) == cudaSuccess))) /* a read-only mapping */
        d->locked[d->n_locked++] = p;
    cudaGetLastError(); /* a refusal only costs copy speed */
    pthread_mutex_unlock(&d->mu);
}

/* The streams and events a device made (those not made are NULL). */
void destroy_streams(CudaDevice *d) {
    if (d->fills_done) cudaEventDestroy(d->fills_done);
    if (d->slots_read) cudaEventDestroy(d->slots_read);
    if (d->copy_stream) cudaStreamDestroy(d->copy_stream);
    if (d->stream) cudaStreamDestroy(d->stream);
}

void cuda_close(MatDevice *base) {
    CudaDevice *d = (CudaDevice *)base;
    cudaGraph_t unfinished = nullptr; /* a recording a failed forward left (nothing runs it now) */
    if (d->recording && cudaStreamEndCapture(d->stream, &unfinished) == cudaSuccess && unfinished) cudaGraphDestroy(unfinished);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (d->graphs[i]) cudaGraphExecDestroy(d->graphs[i]);
    slots_free(d); /* (waits for the copies, which may read the page-locked buffers) */
    gemm_close(d);
    for (int i = 0; i < d->n_locked; i++) cudaHostUnregister(d->locked[i]);
    for (size_t i = 0; i < d->cap; i++)
        if (d->table[i].key.store && !d->table[i].in_slot) cudaFree(d->table[i].dev);
    cudaFree(d->x), cudaFree(d->y), cudaFree(d->stage), cudaFree(d->batch_stage);
    for (int i = 0; i < d->n_events; i++) cudaEventDestroy(d->marks[i]);
    destroy_streams(d);
    pthread_mutex_destroy(&d->mu);
    free(d->table);
    free(d);
}

/* The kernels are built for compute capability 8.0 and later (Makefile). */
bool usable(const cudaDeviceProp &p) { return p.major >= 8; }

} // namespace dfcuda

using namespace dfcuda;

extern "C" int cuda_device_available(void) {
    int n = 0;
    cudaDeviceProp p;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess && usable(p);
}

extern "C" int cuda_device_open(MatDevice **out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return df_fail("K3_DEV=cuda: no CUDA device answers (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    cudaDeviceProp p;
    size_t free_b = 0, total_b = 0;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess ||
        (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
        return df_fail("K3_DEV=cuda: cannot open GPU 0: %s", cudaGetErrorString(e));
    if (!usable(p))
        return df_fail("K3_DEV=cuda: GPU 0 (%.80s) has compute capability %d.%d; this build needs 8.0 or later", p.name,
                       p.major, p.minor);
    CudaDevice *d = (CudaDevice *)df_calloc(1, sizeof *d);
    if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&d->copy_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->fills_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->slots_read, cudaEventDisableTiming)) != cudaSuccess) {
        destroy_streams(d);
        free(d);
        return df_fail("K3_DEV=cuda: cannot create the streams: %s", cudaGetErrorString(e));
    }
    pthread_mutex_init(&d->mu, nullptr);
    d->budget = free_b > RESERVE ? free_b - RESERVE : 0;
    snprintf(d->base.desc, sizeof d->base.desc, "cuda (%.80s, %.1f GB, weights kept up to %.1f GB)", p.name,
             total_b / 1e9, d->budget / 1e9);
    d->base.mul = cuda_mul;
    d->base.mul_heads = cuda_mul_heads;
    d->base.tmul_heads = cuda_tmul_heads;
    d->base.counters = cuda_counters;
    d->base.close = cuda_close;
    d->base.host_buffer = cuda_host_buffer;
    d->base.fault = cuda_fault;
    d->base.ops = &layer_ops;
    d->base.expert_bytes = SIZE_MAX;
    d->base.graphs = 1;
    d->base.tensor_cores = 1;
    d->base.weight_room = d->budget;
    grow_table(d);
    *out = &d->base;
    return 0;
}

/* slots_cuda.cu - the expert slots of devops.h: device memory for the model's expert cache
 * (model/devcache.h), filled on a copy stream beside the compute stream.
 *
 * One allocation holds the slots; a slot holds one expert's three matrices (each as dev_mat reads
 * it: data, then aux at the next 16-byte boundary; each part 256-byte aligned), laid out by the
 * first fill's shapes, which every later fill must have. Ordering by two
 * events: a fill first makes the copy stream wait for `slots_read`, recorded on the compute stream
 * after the last launch that read slots, so it never overwrites bytes a queued launch still needs;
 * a launch that reads a slot filled since the compute stream last waited first makes the compute
 * stream wait for `fills_done`, recorded on the copy stream then (covering every fill so far). So
 * a layer's copies run while the compute stream works on what was queued before them (the shared
 * experts, the latent down-projection, the launch of the experts it holds). From page-locked host
 * memory (host_buffer) the copies are asynchronous: the caller keeps that memory unchanged until
 * fills_wait. Each slot's matrices are also entered in the residency table (mat_cuda.cu) under the
 * keys they were filled from, so a product of the same Mat elsewhere (prefill, verification) reads
 * the slot rather than copying the expert again; a new fill of the slot removes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_dev.h"
#include "util/err.h"

namespace dfcuda {
namespace {

size_t round256(size_t n) { return (n + 255) / 256 * 256; }

void slot_fault(CudaDevice *d, const char *what) {
    if (!d->faulted) snprintf(d->fault_msg, sizeof d->fault_msg, "cuda: %s", what);
    d->faulted = true;
}

bool shaped(const ExpertSlots &sl, const Mat *W, int part) {
    return sl.shape[part][0] == (int)W->fmt && sl.shape[part][1] == W->rows && sl.shape[part][2] == W->cols;
}

/* The first fill lays the slots out by its shapes; false when they do not fit in a slot. */
bool lay_out(ExpertSlots &sl, const Mat *const *w) {
    size_t at = 0;
    for (int p = 0; p < 3; p++) {
        sl.part_off[p] = at, at += round256(dev_bytes(w[p]));
        sl.shape[p][0] = (int)w[p]->fmt, sl.shape[p][1] = w[p]->rows, sl.shape[p][2] = w[p]->cols;
    }
    sl.laid_out = at <= sl.slot_bytes;
    return sl.laid_out;
}

/* Device memory experts may take: what the budget leaves after the weights resident, the
 * allocations, the spine still to be copied and the decode States' copies to come, and at most
 * expert_bytes. */
size_t expert_room(const CudaDevice *d) {
    const size_t spine_resident = d->resident - d->experts_resident;
    const size_t spine_left = d->base.spine_bytes > spine_resident ? d->base.spine_bytes - spine_resident : 0;
    const size_t taken = d->resident + d->allocated + spine_left + d->base.state_bytes;
    const size_t room = d->budget > taken ? d->budget - taken : 0;
    const size_t cap = d->base.expert_bytes > d->experts_resident ? d->base.expert_bytes - d->experts_resident : 0;
    return room < cap ? room : cap;
}

/* Removes slot s's entries from the residency table (those still pointing at it). */
void forget_slot(CudaDevice *d, int s) {
    for (int p = 0; p < 3; p++) {
        MatKey &k = d->slots.keys[s][p];
        if (!k.store) continue;
        Resident *r = lookup(d, k);
        if (r->key.store && r->in_slot && r->slot == s) remove_entry(d, r);
        k = MatKey{};
    }
}

/* Enters part p of slot s, just filled with W, in the residency table under W's key (replacing any
 * other copy of that item: the slot now has its current bytes). */
void enter_slot(CudaDevice *d, int s, const Mat *W, int p) {
    if (!W->key.store) return;
    table_room(d);
    Resident *r = lookup(d, W->key);
    if (r->key.store) remove_entry(d, r), r = lookup(d, W->key);
    uint8_t *at = d->slots.mem + (size_t)s * d->slots.slot_bytes + d->slots.part_off[p];
    *r = Resident{W->key, (int)W->fmt, W->rows, W->cols, 1, at, dev_bytes(W), true, s};
    d->used++;
    d->slots.keys[s][p] = W->key;
}

} // namespace

void slot_ready(CudaDevice *d, int s) {
    ExpertSlots &sl = d->slots;
    if (!sl.pending[s]) return;
    if (check(d, cudaEventRecord(d->fills_done, d->copy_stream), "recording an event"))
        check(d, cudaStreamWaitEvent(d->stream, d->fills_done, 0), "waiting for expert copies");
    for (int i = 0; i < sl.n_pending; i++) sl.pending[sl.pending_list[i]] = 0;
    sl.n_pending = 0;
}

const uint8_t *slot_memory(CudaDevice *d, int s, const Mat *W, int part) {
    const ExpertSlots &sl = d->slots;
    if (s < 0 || s >= sl.n || !sl.laid_out || !shaped(sl, W, part)) {
        slot_fault(d, "an expert read from a slot it does not fit");
        return nullptr;
    }
    slot_ready(d, s);
    d->slot_read = true;
    return sl.mem + (size_t)s * sl.slot_bytes + sl.part_off[part];
}

void slots_read_done(CudaDevice *d) {
    if (d->slot_read) check(d, cudaEventRecord(d->slots_read, d->stream), "recording an event");
    d->slot_read = false;
}

void slots_free(CudaDevice *d) {
    ExpertSlots &sl = d->slots;
    if (!sl.mem) return;
    cudaStreamSynchronize(d->copy_stream), cudaStreamSynchronize(d->stream); /* nothing reads or fills them any more */
    for (int s = 0; s < sl.n; s++) forget_slot(d, s);
    cudaFree(sl.mem);
    d->allocated -= (size_t)sl.n * sl.slot_bytes;
    free(sl.keys), free(sl.pending), free(sl.pending_list);
    sl = ExpertSlots{};
}

int op_expert_slots(MatDevice *base, size_t expert_bytes, int want) {
    Locked L(base);
    CudaDevice *d = L.d;
    slots_free(d);
    if (!L.ok() || want <= 0 || expert_bytes == 0) return 0;
    ExpertSlots &sl = d->slots;
    /* three parts, each up to 15 bytes of padding before its scales and 255 after it */
    const size_t bytes = round256(expert_bytes + 3 * (15 + 255));
    size_t n = expert_room(d) / bytes;
    if (n > (size_t)want) n = (size_t)want;
    if (n == 0 || cudaMalloc((void **)&sl.mem, n * bytes) != cudaSuccess) {
        cudaGetLastError(); /* no room: the model runs without a cache */
        sl = ExpertSlots{};
        return 0;
    }
    sl.n = (int)n, sl.slot_bytes = bytes;
    sl.keys = (MatKey(*)[3])df_calloc(n, sizeof *sl.keys);
    sl.pending = (uint8_t *)df_calloc(n, 1);
    sl.pending_list = (int *)df_malloc(sizeof(int) * n);
    d->allocated += n * bytes;
    return sl.n;
}

void op_slot_fill(MatDevice *base, int s, const Mat *w1, const Mat *w2, const Mat *w3) {
    Locked L(base);
    CudaDevice *d = L.d;
    ExpertSlots &sl = d->slots;
    const Mat *w[3] = {w1, w2, w3};
    if (!L.ok()) return;
    if (s >= 0 && s < sl.n && !sl.laid_out && !lay_out(sl, w)) {
        slot_fault(d, "an expert larger than the expert slots");
        return;
    }
    if (s < 0 || s >= sl.n || !shaped(sl, w1, 0) || !shaped(sl, w2, 1) || !shaped(sl, w3, 2)) {
        slot_fault(d, "an expert copied into a slot it does not fit");
        return;
    }
    forget_slot(d, s);
    if (!check(d, cudaStreamWaitEvent(d->copy_stream, d->slots_read, 0), "ordering expert copies")) return;
    for (int p = 0; p < 3; p++) {
        copy_weights(d, d->copy_stream, sl.mem + (size_t)s * sl.slot_bytes + sl.part_off[p], w[p]);
        enter_slot(d, s, w[p], p);
    }
    if (!sl.pending[s]) sl.pending[s] = 1, sl.pending_list[sl.n_pending++] = s;
}

int op_fills_wait(MatDevice *base) {
    Locked L(base);
    if (L.ok()) check(L.d, cudaStreamSynchronize(L.d->copy_stream), "copying experts");
    return L.ok() ? 0 : df_fail("%s", L.d->fault_msg);
}

} // namespace dfcuda

/* devcache.h - the layer pass's expert cache in device memory: which routed expert each of the
 * device's expert slots holds, and which slot an expert that misses is copied into.
 *
 * The device provides the slots and the copies (devops.h expert_slots, slot_fill); this is their
 * bookkeeping, in the model because only the model knows which (layer, expert) a Mat is. Admission
 * and eviction follow the host store's policy (cache_index.h: the same module, CRF by default), so
 * the device's cache and the host's rank experts alike. Every expert that is copied to the device
 * is admitted (the copy is the admission); the layer pass decides which misses are copied
 * (devpass.c, run_batch).
 *
 * Staleness. A slot remembers the residency key (mat.h) of the host bytes it was copied from. An
 * expert counts as held only while the source still hands it out under that same key: a streaming
 * store that refilled the host slot it came from (a new generation, or another slot) makes the
 * device copy unverifiable, and the expert is copied again into its slot (a re-copy). A mapped
 * store's keys never change.
 *
 * Protocol per layer (as the host store does it): devcache_layer, then for the layer's experts
 * devcache_find (a hit locks its slot for the layer), devcache_admit for the misses to copy (the
 * victim is never a slot locked for the layer), and devcache_use for every routed expert in the
 * order acquired. Not thread-safe: the model's one forward at a time serialises it. */
#ifndef DF_DEVCACHE_H
#define DF_DEVCACHE_H

#include <stdint.h>

#include "kernels/mat.h"
#include "model/cache_index.h"
#include "model/model.h"

typedef struct {
    CacheIndex ci;       /* keys layer * n_experts + expert, as the host store's */
    MatKey *from;        /* [n_slots] the host key (gate matrix's) each slot was copied from */
    int *held, n_held;   /* slots locked for the layer in progress */
    int layer;           /* the layer in progress, -1 before the first */
    DevCacheCounts *c;   /* where it counts (the model's stats) */
} DevCache;

/* n_slots >= 1 empty slots for a model of n_layers x n_experts, run by policy, counting into *c. */
void devcache_init(DevCache *dc, CachePolicy policy, int n_slots, int n_layers, int n_experts, DevCacheCounts *c);
void devcache_free(DevCache *dc);
/* A layer's routed experts come next: the previous layer's slots are unlocked; a layer not after the
 * previous one starts a new forward pass (the policy's clock). */
void devcache_layer(DevCache *dc, int layer);
/* The slot holding expert `expert` of the current layer copied from the bytes keyed *from, locked for
 * the layer and counted as a hit; else -1, counted as a miss. */
int devcache_find(DevCache *dc, int expert, const MatKey *from);
/* A slot to copy the expert (keyed *from) into, now assigned to it and locked for the layer: its own
 * slot when it holds older bytes of it, else an empty one or the policy's victim; -1 when every slot
 * is locked. The caller copies it there before anything reads the slot. */
int devcache_admit(DevCache *dc, int expert, const MatKey *from);
/* Records one use of the current layer's expert (after find and admit, in the order acquired). */
void devcache_use(DevCache *dc, int expert);
/* The policy's rank of the current layer's expert (higher: more likely used again soon), for
 * choosing which misses to admit. */
double devcache_heat(const DevCache *dc, int expert);

#endif

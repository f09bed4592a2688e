#include "model/cache_index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* The clock a key's count decays with: forward passes (CRF) or uses (LFU). */
static double clock_now(const CacheIndex *ci) {
    return (double)(ci->policy == POLICY_CRF ? ci->pass : ci->tick) / ci->half_life;
}

/* Which heap a slot belongs in: its key's layer, or the empty slots' heap. */
static int heap_of(const CacheIndex *ci, int slot) {
    int key = ci->key_of_slot[slot];
    return key < 0 ? ci->n_layers : key / ci->n_experts;
}

static double weight_of(const CacheIndex *ci, int slot) {
    int key = ci->key_of_slot[slot];
    return key < 0 || ci->policy == POLICY_LRU ? -INFINITY : ci->weight[key];
}

/* a goes before b (is evicted first), given their weights. */
static int before_w(const CacheIndex *ci, int a, double wa, int b, double wb) {
    if (wa != wb) return wa < wb;
    if (ci->last_use[a] != ci->last_use[b]) return ci->last_use[a] < ci->last_use[b];
    return a < b;
}

/* Within one heap (one layer, or the empty slots). */
static int before(const CacheIndex *ci, int a, int b) { return before_w(ci, a, weight_of(ci, a), b, weight_of(ci, b)); }

static void heap_put(CacheIndex *ci, CidxHeap *h, int at, int slot) { h->slot[at] = slot, ci->heap_at[slot] = at; }

static void sift_up(CacheIndex *ci, CidxHeap *h, int at) {
    int slot = h->slot[at];
    while (at > 0 && before(ci, slot, h->slot[(at - 1) / 2])) heap_put(ci, h, at, h->slot[(at - 1) / 2]), at = (at - 1) / 2;
    heap_put(ci, h, at, slot);
}

static void sift_down(CacheIndex *ci, CidxHeap *h, int at) {
    int slot = h->slot[at];
    for (;;) {
        int c = 2 * at + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(ci, h->slot[c + 1], h->slot[c])) c++;
        if (!before(ci, h->slot[c], slot)) break;
        heap_put(ci, h, at, h->slot[c]), at = c;
    }
    heap_put(ci, h, at, slot);
}

static void heap_insert(CacheIndex *ci, int slot) {
    CidxHeap *h = &ci->heaps[heap_of(ci, slot)];
    heap_put(ci, h, h->n++, slot);
    sift_up(ci, h, h->n - 1);
}

static void heap_remove(CacheIndex *ci, int slot) {
    CidxHeap *h = &ci->heaps[heap_of(ci, slot)];
    int at = ci->heap_at[slot], last = h->slot[--h->n];
    ci->heap_at[slot] = -1;
    if (last == slot) return;
    heap_put(ci, h, at, last);
    sift_up(ci, h, at);
    sift_down(ci, h, ci->heap_at[last]);
}

/* The slot's priority changed: restore its place (nothing to do while locked). */
static void reorder(CacheIndex *ci, int slot) {
    if (ci->heap_at[slot] < 0) return;
    CidxHeap *h = &ci->heaps[heap_of(ci, slot)];
    sift_up(ci, h, ci->heap_at[slot]);
    sift_down(ci, h, ci->heap_at[slot]);
}

void cidx_init(CacheIndex *ci, CachePolicy policy, int n_slots, int n_layers, int n_experts) {
    memset(ci, 0, sizeof *ci);
    ci->policy = policy;
    ci->n_slots = n_slots, ci->n_layers = n_layers, ci->n_experts = n_experts, ci->n_keys = n_layers * n_experts;
    ci->half_life = policy == POLICY_LFU ? 8.0 * n_slots : CIDX_CRF_HALF_LIFE;
    ci->phase = policy == POLICY_CRF ? CIDX_CRF_PHASE : 0;
    ci->slot_of_key = df_malloc(sizeof(int) * (size_t)ci->n_keys);
    ci->key_of_slot = df_malloc(sizeof(int) * (size_t)n_slots);
    memset(ci->slot_of_key, 0xff, sizeof(int) * (size_t)ci->n_keys);
    memset(ci->key_of_slot, 0xff, sizeof(int) * (size_t)n_slots);
    ci->last_use = df_calloc((size_t)n_slots, sizeof *ci->last_use);
    ci->locked = df_calloc((size_t)n_slots, 1);
    ci->weight = df_malloc(sizeof *ci->weight * (size_t)ci->n_keys);
    for (int k = 0; k < ci->n_keys; k++) ci->weight[k] = -INFINITY;
    /* a layer's heap never holds more slots than the layer has experts */
    size_t per_layer = (size_t)(n_slots < n_experts ? n_slots : n_experts);
    ci->storage = df_malloc(sizeof(int) * (per_layer * (size_t)n_layers + (size_t)n_slots));
    ci->heaps = df_calloc((size_t)n_layers + 1, sizeof *ci->heaps);
    for (int l = 0; l <= n_layers; l++) ci->heaps[l].slot = ci->storage + per_layer * (size_t)l;
    ci->heap_at = df_malloc(sizeof(int) * (size_t)n_slots);
    CidxHeap *empty = &ci->heaps[n_layers];
    for (int s = 0; s < n_slots; s++) heap_put(ci, empty, s, s); /* in slot order: a valid heap */
    empty->n = n_slots;
}

void cidx_free(CacheIndex *ci) {
    free(ci->slot_of_key), free(ci->key_of_slot), free(ci->last_use), free(ci->locked), free(ci->weight);
    free(ci->storage), free(ci->heaps), free(ci->heap_at);
    memset(ci, 0, sizeof *ci);
}

void cidx_use(CacheIndex *ci, int key, int slot) {
    ci->tick++;
    if (ci->policy != POLICY_LRU) { /* count = 2^(weight - now) before this use, plus one */
        double now = clock_now(ci);
        ci->weight[key] = now + log2(1.0 + exp2(ci->weight[key] - now));
    }
    if (slot >= 0) ci->last_use[slot] = ci->tick, reorder(ci, slot);
}

void cidx_touch(CacheIndex *ci, int slot) {
    ci->last_use[slot] = ci->tick;
    reorder(ci, slot);
}

void cidx_next_pass(CacheIndex *ci) { ci->pass++; }

/* Halvings a layer's experts are credited with while the pass is at layer `now`: the share of a
 * pass until the pass reaches layer l, and one more for `now` itself. */
static double phase_of(const CacheIndex *ci, int l, int now) {
    if (now < 0 || ci->phase == 0) return 0;
    int ahead = ((l - now - 1) % ci->n_layers + ci->n_layers) % ci->n_layers + 1;
    return ci->phase * ((double)ahead / ci->n_layers + (l == now));
}

int cidx_victim(const CacheIndex *ci, int now) {
    const CidxHeap *empty = &ci->heaps[ci->n_layers];
    if (empty->n > 0) return empty->slot[0];
    int best = -1;
    double best_w = 0;
    for (int l = 0; l < ci->n_layers; l++) {
        if (ci->heaps[l].n == 0) continue;
        int s = ci->heaps[l].slot[0];
        double w = weight_of(ci, s) - phase_of(ci, l, now);
        if (best < 0 || before_w(ci, s, w, best, best_w)) best = s, best_w = w;
    }
    return best;
}

void cidx_assign(CacheIndex *ci, int slot, int key) {
    int unlocked = ci->heap_at[slot] >= 0;
    if (unlocked) heap_remove(ci, slot); /* it may change heaps */
    int old = ci->key_of_slot[slot];
    if (old >= 0) ci->slot_of_key[old] = -1;
    ci->key_of_slot[slot] = key;
    if (key >= 0) ci->slot_of_key[key] = slot;
    else ci->last_use[slot] = 0; /* empty slots go in slot order */
    if (unlocked) heap_insert(ci, slot);
}

void cidx_lock(CacheIndex *ci, int slot, int on) {
    on = on != 0;
    if (ci->locked[slot] == on) return;
    ci->locked[slot] = (uint8_t)on;
    if (on) heap_remove(ci, slot);
    else heap_insert(ci, slot);
}

const char *cache_policy_name(CachePolicy p) { return p == POLICY_CRF ? "crf" : p == POLICY_LFU ? "lfu" : "lru"; }

/* cache_index.h - which (layer, expert) sits in which cache slot, and which slot to give up.
 *
 * Pure bookkeeping with no I/O, shared by the streaming store's expert cache in host memory
 * (store/experts.c), the layer pass's expert cache in device memory (model/devcache.c) and the
 * trace replayer that chose the policy (bench/bench_stream_policy.c), so the measured policy is
 * the shipped one, and both caches rank experts alike. (It lives in src/model, below the store.) Keys are
 * layer * n_experts + expert. Three eviction policies, each a priority per slot (lowest goes):
 *   CRF - combined recency and frequency (the default): every key has a use count that decays by
 *         half every `half_life` forward passes (cidx_next_pass), so an expert used in several
 *         recent tokens outranks one used once, and one used often long ago fades. It is also
 *         layer-aware: a forward pass visits the layers in order, so when the pass is at layer
 *         `now` an expert of layer l cannot be needed before the pass gets to l again. Its count
 *         is compared as if `phase` times d(l) halvings had passed, d(l) the share of a pass until
 *         layer l comes (1/L for the next layer, 1 for `now` itself, whose unheld experts the pass
 *         has just not chosen: 2 for those);
 *   LFU - the same count, but decaying by half every 8 x n_slots uses (the clock is the use,
 *         not the forward pass, so its memory shrinks with the cache), not layer-aware;
 *   LRU - the slot used longest ago.
 * Counts are kept for every key, cached or not (an expert that comes back keeps its history).
 * Ties go to the least recently used slot, then the lower slot index. Empty slots are taken
 * first (lowest index first); locked slots (in use, or being filled) are never evicted.
 *
 * A decayed count c at clock t is stored as log2(c) + t / half_life: between two uses of a key
 * this number does not change while the order it gives equals the order of the decayed counts at
 * any later time. So the unlocked slots of each layer sit in a binary heap, and a victim is the
 * best of the layers' heap tops: O(log slots) per use, O(layers) per eviction.
 * Not thread-safe: the owner serialises calls. */
#ifndef DF_CACHE_INDEX_H
#define DF_CACHE_INDEX_H

#include <stdint.h>

typedef enum { POLICY_LRU = 0, POLICY_LFU = 1, POLICY_CRF = 2 } CachePolicy;

/* The store's policy unless K3_CACHE_POLICY says otherwise, chosen on real routing traces
 * (docs/PERFORMANCE.md, Expert cache policy), with CRF's half-life in forward passes and its
 * layer-phase weight in halvings. */
#define CACHE_POLICY_DEFAULT POLICY_CRF
#define CACHE_POLICY_DEFAULT_NAME "crf" /* the settings table's default, the same policy */
#define CIDX_CRF_HALF_LIFE 12.0
#define CIDX_CRF_PHASE 1.0

typedef struct {
    int *slot, n;         /* slots, lowest priority first */
} CidxHeap;

typedef struct {
    CachePolicy policy;
    int n_slots, n_layers, n_experts, n_keys;
    int *slot_of_key;     /* [n_keys] slot or -1 */
    int *key_of_slot;     /* [n_slots] key or -1 (empty) */
    uint64_t *last_use;   /* [n_slots] tick of the last use (or of the fill) */
    uint8_t *locked;      /* [n_slots] nonzero: not evictable (read it; change it with cidx_lock) */
    double *weight;       /* [n_keys] log2(decayed count) + clock / half_life; -inf: never used */
    double half_life;     /* in passes (CRF) or uses (LFU) */
    double phase;         /* CRF's layer-phase weight (0: not layer-aware) */
    uint64_t tick, pass;  /* uses so far, forward passes so far */
    CidxHeap *heaps;      /* [n_layers + 1]: each layer's unlocked slots, then the empty ones */
    int *heap_at;         /* [n_slots] place in its heap, or -1 while locked */
    int *storage;         /* the heaps' arrays */
} CacheIndex;

/* Keys are layer * n_experts + expert, layer < n_layers. half_life and phase take the policy's
 * defaults and may be changed before the first use. */
void cidx_init(CacheIndex *ci, CachePolicy policy, int n_slots, int n_layers, int n_experts);
void cidx_free(CacheIndex *ci);
static inline int cidx_lookup(const CacheIndex *ci, int key) { return ci->slot_of_key[key]; }
/* Records a use of key (held in slot, or -1 when it is not cached). */
void cidx_use(CacheIndex *ci, int key, int slot);
/* Marks slot as just filled (recent) without counting a use: a guess that is read ahead. */
void cidx_touch(CacheIndex *ci, int slot);
/* A new forward pass begins (CRF's clock). */
void cidx_next_pass(CacheIndex *ci);
/* The slot to fill next while the forward pass is at layer `now` (-1: unknown): an empty one,
 * else the policy's victim; -1 when all are locked. */
int cidx_victim(const CacheIndex *ci, int now);
/* Makes slot hold key (forgetting its previous key); key -1 empties it. */
void cidx_assign(CacheIndex *ci, int slot, int key);
/* Locks (on != 0) or unlocks a slot. */
void cidx_lock(CacheIndex *ci, int slot, int on);

/* "crf", "lfu" or "lru", as K3_CACHE_POLICY spells it. */
const char *cache_policy_name(CachePolicy p);

#endif

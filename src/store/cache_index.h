/* cache_index.h - which (layer, expert) sits in which cache slot, and which slot to give up.
 *
 * Pure bookkeeping with no I/O, shared by the expert store and the trace replayer that chose the
 * policy (bench/bench_stream_policy.c), so the measured policy is the shipped one. Keys are
 * layer * n_experts + expert. Two eviction policies:
 *   LRU - evict the slot used longest ago;
 *   LFU - evict the key used least often (counts over all keys, cached or not, halved every
 *         `n_slots * 8` uses so the counts follow drift), ties broken by recency.
 * Empty slots are always taken first; locked slots (in use, or being filled) are never evicted.
 * With more than CIDX_SAMPLE slots the victim is the policy's choice among CIDX_SAMPLE slots
 * drawn at random (deterministic sequence), so an eviction costs the same at any cache size.
 * Not thread-safe: the owner serialises calls. */
#ifndef DF_CACHE_INDEX_H
#define DF_CACHE_INDEX_H

#include <stdint.h>

typedef enum { POLICY_LRU = 0, POLICY_LFU = 1 } CachePolicy;

typedef struct {
    CachePolicy policy;
    int n_slots, n_keys;
    int *slot_of_key;     /* [n_keys] slot or -1 */
    int *key_of_slot;     /* [n_slots] key or -1 (empty) */
    uint64_t *last_use;   /* [n_slots] tick of the last use */
    uint8_t *locked;      /* [n_slots] nonzero: not evictable */
    uint32_t *uses;       /* [n_keys] decayed use counts (LFU) */
    uint64_t tick, halve_at;
    int *free_slots, n_free; /* empty slots (a stack) and each slot's place in it, or -1 */
    int *free_pos;
    uint64_t rng;
} CacheIndex;

#define CIDX_SAMPLE 64

void cidx_init(CacheIndex *ci, CachePolicy policy, int n_slots, int n_keys);
void cidx_free(CacheIndex *ci);
static inline int cidx_lookup(const CacheIndex *ci, int key) { return ci->slot_of_key[key]; }
/* Records a use of key (held in slot, or -1 when it is not cached). */
void cidx_use(CacheIndex *ci, int key, int slot);
/* The slot to fill next (an empty one, else the policy's victim), or -1 when all are locked. */
int cidx_victim(CacheIndex *ci);
/* Makes slot hold key (forgetting its previous key). */
void cidx_assign(CacheIndex *ci, int slot, int key);

/* "lru" or "lfu", as K3_CACHE_POLICY spells it. */
const char *cache_policy_name(CachePolicy p);

#endif

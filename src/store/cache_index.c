#include "store/cache_index.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void cidx_init(CacheIndex *ci, CachePolicy policy, int n_slots, int n_keys) {
    memset(ci, 0, sizeof *ci);
    ci->policy = policy;
    ci->n_slots = n_slots, ci->n_keys = n_keys;
    ci->slot_of_key = df_malloc(sizeof(int) * (size_t)n_keys);
    ci->key_of_slot = df_malloc(sizeof(int) * (size_t)n_slots);
    memset(ci->slot_of_key, 0xff, sizeof(int) * (size_t)n_keys);
    memset(ci->key_of_slot, 0xff, sizeof(int) * (size_t)n_slots);
    ci->last_use = df_calloc((size_t)n_slots, sizeof *ci->last_use);
    ci->locked = df_calloc((size_t)n_slots, 1);
    ci->uses = df_calloc((size_t)n_keys, sizeof *ci->uses);
    ci->halve_at = (uint64_t)n_slots * 8;
}

void cidx_free(CacheIndex *ci) {
    free(ci->slot_of_key), free(ci->key_of_slot), free(ci->last_use), free(ci->locked), free(ci->uses);
    memset(ci, 0, sizeof *ci);
}

void cidx_use(CacheIndex *ci, int key, int slot) {
    ci->tick++;
    if (slot >= 0) ci->last_use[slot] = ci->tick;
    if (ci->policy != POLICY_LFU) return;
    ci->uses[key]++;
    if (ci->tick % ci->halve_at == 0)
        for (int k = 0; k < ci->n_keys; k++) ci->uses[k] >>= 1;
}

/* Lower is evicted first. */
static uint64_t keep_score(const CacheIndex *ci, int slot) {
    if (ci->policy == POLICY_LRU) return ci->last_use[slot];
    return ((uint64_t)ci->uses[ci->key_of_slot[slot]] << 40) | (ci->last_use[slot] & ((1ull << 40) - 1));
}

int cidx_victim(const CacheIndex *ci) {
    int best = -1;
    uint64_t best_score = 0;
    for (int s = 0; s < ci->n_slots; s++) {
        if (ci->locked[s]) continue;
        if (ci->key_of_slot[s] < 0) return s;
        uint64_t score = keep_score(ci, s);
        if (best < 0 || score < best_score) best = s, best_score = score;
    }
    return best;
}

void cidx_assign(CacheIndex *ci, int slot, int key) {
    int old = ci->key_of_slot[slot];
    if (old >= 0) ci->slot_of_key[old] = -1;
    ci->key_of_slot[slot] = key;
    if (key >= 0) ci->slot_of_key[key] = slot;
}

int cache_policy_parse(const char *name, CachePolicy *out) {
    if (!strcmp(name, "lru")) return *out = POLICY_LRU, 0;
    if (!strcmp(name, "lfu")) return *out = POLICY_LFU, 0;
    return df_fail("K3_CACHE_POLICY: '%s' is not lru or lfu", name);
}

const char *cache_policy_name(CachePolicy p) { return p == POLICY_LFU ? "lfu" : "lru"; }

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
    ci->free_slots = df_malloc(sizeof(int) * (size_t)n_slots);
    ci->free_pos = df_malloc(sizeof(int) * (size_t)n_slots);
    for (int s = 0; s < n_slots; s++) ci->free_slots[s] = n_slots - 1 - s, ci->free_pos[n_slots - 1 - s] = s;
    ci->n_free = n_slots;
    ci->rng = 0x9e3779b97f4a7c15ull;
}

void cidx_free(CacheIndex *ci) {
    free(ci->slot_of_key), free(ci->key_of_slot), free(ci->last_use), free(ci->locked), free(ci->uses);
    free(ci->free_slots), free(ci->free_pos);
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

static int better_victim(const CacheIndex *ci, int best, int s) {
    return best < 0 || keep_score(ci, s) < keep_score(ci, best) ? s : best;
}

static uint64_t next_rand(CacheIndex *ci) {
    ci->rng ^= ci->rng << 13, ci->rng ^= ci->rng >> 7, ci->rng ^= ci->rng << 17;
    return ci->rng;
}

int cidx_victim(CacheIndex *ci) {
    for (int i = ci->n_free - 1; i >= 0; i--)
        if (!ci->locked[ci->free_slots[i]]) return ci->free_slots[i];
    int best = -1;
    if (ci->n_slots > CIDX_SAMPLE) {
        for (int i = 0; i < CIDX_SAMPLE; i++) {
            int s = (int)(next_rand(ci) % (uint64_t)ci->n_slots);
            if (!ci->locked[s]) best = better_victim(ci, best, s);
        }
        if (best >= 0) return best;
    }
    for (int s = 0; s < ci->n_slots; s++) /* small caches, or a sample that was all locked */
        if (!ci->locked[s]) best = better_victim(ci, best, s);
    return best;
}

void cidx_assign(CacheIndex *ci, int slot, int key) {
    int old = ci->key_of_slot[slot];
    if (old >= 0) ci->slot_of_key[old] = -1;
    ci->key_of_slot[slot] = key;
    if (key >= 0) ci->slot_of_key[key] = slot;
    if (key >= 0 && ci->free_pos[slot] >= 0) { /* leaves the free stack: move the top into its place */
        int at = ci->free_pos[slot], top = ci->free_slots[--ci->n_free];
        ci->free_slots[at] = top, ci->free_pos[top] = at;
        ci->free_pos[slot] = -1;
    } else if (key < 0 && ci->free_pos[slot] < 0) {
        ci->free_pos[slot] = ci->n_free, ci->free_slots[ci->n_free++] = slot;
    }
}

const char *cache_policy_name(CachePolicy p) { return p == POLICY_LFU ? "lfu" : "lru"; }

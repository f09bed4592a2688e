#include "model/devcache.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void devcache_init(DevCache *dc, CachePolicy policy, int n_slots, int n_layers, int n_experts, DevCacheCounts *c) {
    memset(dc, 0, sizeof *dc);
    dc->c = c;
    cidx_init(&dc->ci, policy, n_slots, n_layers, n_experts);
    dc->from = df_calloc((size_t)n_slots, sizeof *dc->from);
    dc->held = df_malloc(sizeof *dc->held * (size_t)n_slots);
    dc->layer = -1;
}

void devcache_free(DevCache *dc) {
    cidx_free(&dc->ci);
    free(dc->from), free(dc->held);
    memset(dc, 0, sizeof *dc);
}

static int key_of(const DevCache *dc, int expert) { return dc->layer * dc->ci.n_experts + expert; }

static void hold(DevCache *dc, int slot) {
    if (dc->ci.locked[slot]) return;
    cidx_lock(&dc->ci, slot, 1);
    dc->held[dc->n_held++] = slot;
}

void devcache_layer(DevCache *dc, int layer) {
    for (int i = 0; i < dc->n_held; i++) cidx_lock(&dc->ci, dc->held[i], 0);
    dc->n_held = 0;
    if (layer <= dc->layer) cidx_next_pass(&dc->ci);
    dc->layer = layer;
}

int devcache_find(DevCache *dc, int expert, const MatKey *from) {
    int slot = cidx_lookup(&dc->ci, key_of(dc, expert));
    if (slot < 0 || !mat_key_equal(&dc->from[slot], from)) {
        dc->c->misses++;
        return -1;
    }
    hold(dc, slot);
    dc->c->hits++;
    return slot;
}

int devcache_admit(DevCache *dc, int expert, const MatKey *from) {
    const int key = key_of(dc, expert);
    int slot = cidx_lookup(&dc->ci, key);
    if (slot >= 0) dc->c->recopies++; /* held from bytes the source no longer hands out under that key */
    else if ((slot = cidx_victim(&dc->ci, dc->layer)) < 0) return -1;
    else if (dc->ci.key_of_slot[slot] >= 0) dc->c->evictions++;
    cidx_assign(&dc->ci, slot, key);
    dc->from[slot] = *from;
    hold(dc, slot);
    dc->c->admitted++;
    return slot;
}

void devcache_use(DevCache *dc, int expert) {
    const int key = key_of(dc, expert);
    cidx_use(&dc->ci, key, cidx_lookup(&dc->ci, key));
}

double devcache_heat(const DevCache *dc, int expert) { return dc->ci.weight[key_of(dc, expert)]; }

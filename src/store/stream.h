/* stream.h - the streaming weight store: a model larger than RAM run within a memory budget.
 *
 * stream_open measures the budget (budget.h), plans it - the process's fixed needs first, then
 * as many spine layers pinned as fit (K3_PIN_LAYERS overrides) with two stream buffers for the
 * rest, then the expert cache from what remains - and opens the shards, the I/O threads, the
 * spine store and the expert store accordingly. Every buffer is allocated here, once.
 *
 * Settings: K3_RAM_GB, K3_PIN_LAYERS, K3_CACHE_POLICY (lfu, the default, or lru), K3_PREFETCH
 * (0: no expert guesses, no read-ahead of the next streamed layer), K3_DIRECT (0 forces buffered
 * reads), K3_IO_THREADS (default 8). The StreamStore owns all of it until stream_close. */
#ifndef DF_STREAM_H
#define DF_STREAM_H

#include <stdio.h>

#include "store/experts.h"
#include "store/spine.h"

typedef struct {
    uint64_t budget;
    char how[160];
    uint64_t fixed;          /* estimated: scratch, decode state, catalog, small vectors, runtime */
    uint64_t globals;        /* lm_head and the other global matrices */
    uint64_t pinned_bytes;   /* pinned spine layers */
    uint64_t stream_buf;     /* bytes of one of the two stream buffers (0: none) */
    uint64_t spine_bytes;    /* all layers' matrices */
    int pinned, n_layers;
    int slots;               /* expert cache slots */
    uint64_t slot_bytes;
} StreamPlan;

typedef struct {
    StreamPlan plan;
    Shards shards;
    IoPool *io;
    SpineStore spine;
    ExpertStore experts;
    CachePolicy policy;
    int prefetch;
    int lookahead;           /* K3_LOOKAHEAD: prefetch router lookahead's guesses */
    int populate;            /* K3_POPULATE: prepare the expert cache's pages in the background */
} StreamStore;

typedef struct {
    uint64_t spine_bytes, expert_bytes;
    ExpertCounters experts;
} StreamCounters;

/* K3_STORE: "mapped", "stream", or "auto" (stream when the checkpoint is larger than the
 * budget). Sets *stream. */
int stream_wanted(const Catalog *cat, int *stream);

/* What the caller will run, for the memory plan and the spine format. */
typedef struct {
    int context;             /* positions the decode state is planned for */
    int int8_spine;          /* stream the int8 spine files (i8spine.h) instead of the BF16 tensors */
    int speculation;         /* reserve speculation's rollback records (K3_SPEC on) */
    int extra_states;        /* decode States kept besides the working one (the server's prompt snapshot) */
    uint64_t mla_position_bytes; /* MLA cache bytes per position (model_mla_bytes_per_position) */
} StreamNeeds;

int stream_open(StreamStore *s, const Catalog *cat, const StreamNeeds *needs);
/* Frees what only loading needed (after model_create). */
void stream_end_load(StreamStore *s);
void stream_close(StreamStore *s);
void stream_print_plan(const StreamStore *s, FILE *f);
StreamCounters stream_counters(StreamStore *s);

#endif

/* stream.h - the streaming weight store: a model larger than RAM run within a memory budget.
 *
 * stream_open measures the budget (budget.h), plans it - the process's fixed needs first, then
 * as many spine layers pinned as fit (or as many as StoreOptions.pin_layers says) with two stream
 * buffers for the rest, then the expert cache from what remains - and opens the shards, the I/O
 * threads, the spine store and the expert store accordingly. Every buffer is allocated here,
 * once. The StreamStore owns all of it until stream_close. */
#ifndef DF_STREAM_H
#define DF_STREAM_H

#include <stdio.h>

#include "store/experts.h"
#include "store/options.h"
#include "store/spine.h"

typedef struct {
    uint64_t budget;
    char how[160];
    uint64_t fixed;          /* compute bytes (StreamNeeds), catalog, small vectors, runtime */
    uint64_t globals;        /* lm_head and the other global matrices */
    uint64_t pinned_bytes;   /* pinned spine layers */
    uint64_t stream_buf;     /* bytes of one of the two stream buffers (0: none) */
    uint64_t spine_bytes;    /* all layers' matrices */
    int pinned, n_layers;
    int spine_on_device;     /* StreamNeeds.spine_on_device: pins chosen for it */
    int slots;               /* expert cache slots */
    uint64_t slot_bytes;
} StreamPlan;

typedef struct {
    StreamPlan plan;
    Shards shards;
    IoPool *io;
    SpineStore spine;
    ExpertStore experts;
    StoreOptions opt;
} StreamStore;

typedef struct {
    uint64_t spine_bytes, expert_bytes;
    ExpertCounters experts;
} StreamCounters;

/* What the caller will run, for the memory plan and the spine format. */
typedef struct {
    int int8_spine;          /* stream the int8 spine files (i8spine.h) instead of the BF16 tensors */
    uint64_t compute_bytes;  /* what the model, its States and the decode sessions allocate besides the
                              * weights, from their owners (model_memory, session_memory) */
    int spine_on_device;     /* an accelerator will hold every spine layer once it has seen it: the
                              * automatic plan pins none in RAM (each streams once, at start-up) and
                              * gives that memory to the expert cache */
} StreamNeeds;

/* Whether to stream: o->kind, where AUTO streams when mapping would not fit the budget: the whole
 * checkpoint (a mapped page the model touched stays resident) plus the fixed needs the streaming
 * plan counts (needs->compute_bytes, the catalog, the small vectors, the runtime). Sets *stream.
 * MAPPED with a budget given (o->ram_bytes) that mapping would not keep to is refused (-1 with a
 * message saying what the budget cannot hold); MAPPED with the automatic budget maps whatever the
 * size (a model larger than RAM then pages from disk). */
int stream_wanted(const Catalog *cat, const StreamNeeds *needs, const StoreOptions *o, int *stream);

/* o (copied) must be valid; o->pin_layers above the model's layer count fails. */
int stream_open(StreamStore *s, const Catalog *cat, const StreamNeeds *needs, const StoreOptions *o);
/* Frees what only loading needed (after model_create). */
void stream_end_load(StreamStore *s);
void stream_close(StreamStore *s);
void stream_print_plan(const StreamStore *s, FILE *f);
StreamCounters stream_counters(StreamStore *s);

#endif

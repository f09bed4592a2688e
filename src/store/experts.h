/* experts.h - routed experts read from the shards on demand into a bounded in-RAM cache.
 *
 * Each expert is one contiguous span, read with one positional read into a slot (shardio.h: no
 * page cache). A layer's missing experts are read in parallel on the I/O pool, in the order the
 * model acquires them and as many ahead as half the cache; experts already cached are hits; a
 * routed expert is never evicted before it is acquired, so a pass reads each of its routed experts
 * at most once, however many rows chose it (a prefill window of thousands of rows routes to most of
 * a layer's experts: they stream through the cache in order). After serving a decode step's layer
 * l, the store starts reading in the background what layer l+1 selected for the previous token
 * (consecutive tokens share many choices), so those reads overlap the computation of layer l;
 * router lookahead's guesses (predict) are read the same way.
 * Slots are allocated once at open; eviction follows the
 * CacheIndex policy. A failed read is reported by the acquire that needs the expert, naming the
 * shard and byte range; a failed prefetch that is never needed is dropped.
 *
 * Implements ExpertSource (the model's view). The matrices acquire hands out stay valid until the
 * next acquire; their residency keys (kernels/mat.h) name the slot and how many times it has been
 * filled, so a device never mistakes a refilled slot's bytes for the expert it held before. One
 * thread calls acquire; the I/O threads only fill slots. */
#ifndef DF_EXPERTS_H
#define DF_EXPERTS_H

#include <pthread.h>
#include <stdatomic.h>

#include "model/model.h"
#include "model/cache_index.h"
#include "store/iopool.h"
#include "store/shardio.h"

typedef struct {
    uint64_t hits;           /* needed and already in the cache */
    uint64_t prefetch_hits;  /* of those, brought in by prefetch */
    uint64_t misses;         /* needed and not cached: read on demand */
    uint64_t prefetches;     /* background reads started */
    uint64_t bytes_read;     /* bytes read from the shards (whole aligned spans) */
} ExpertCounters;

typedef struct ExpertSlot ExpertSlot;

typedef struct {
    ExpertSource src;        /* first member: the model calls it through ExpertSource */
    const Catalog *cat;
    const Shards *shards;
    IoPool *io;
    pthread_mutex_t mu;
    pthread_cond_t done;
    CacheIndex ci;
    ExpertSlot *slots;
    uint64_t slot_bytes;     /* stride of the slots in the arena (a multiple of SHARD_ALIGN) */
    uint8_t *arena;
    size_t arena_bytes;
    int *pinned, n_pinned;   /* slots handed out by the last acquire */
    int *predict;            /* [n_layers][top_k]: each layer's last selection, -1 = none */
    int prefetch;
    int *routed, n_routed, routed_layer; /* [n_experts] the last route's distinct experts, ascending */
    int next_read;           /* the first of them whose turn to be read ahead has not come */
    unsigned char *acquired; /* [n_experts] which of them were acquired since the route */
    int *ids;                /* [n_experts] scratch */
    IoJob **jobs;            /* [n_experts] reads submitted together */
    ExpertMats *got;         /* [n_slots] an acquire's matrices in claim order */
    ExpertCounters c;        /* under mu */
    uint32_t id;             /* the store id of its residency keys */
    pthread_t populator;     /* prepares the arena's pages in the background (populate_arena) */
    int populating;
    atomic_int populate_stop;
} ExpertStore;

/* n_slots >= 1. prefetch: 0 disables background reads (K3_PREFETCH=0). lookahead: accept the
 * model's router-lookahead guesses (ExpertSource.predict; K3_LOOKAHEAD). populate: prepare the
 * cache's pages on a background thread (K3_POPULATE). */
int experts_open(ExpertStore *es, const Catalog *cat, const Shards *shards, IoPool *io, int n_slots,
                 CachePolicy policy, int prefetch, int lookahead, int populate);
/* The I/O pool must be stopped first (no read may still target a slot). */
void experts_close(ExpertStore *es);
/* Buffer bytes of one slot. */
uint64_t experts_slot_bytes(const Catalog *cat);
ExpertCounters experts_counters(ExpertStore *es);

#endif

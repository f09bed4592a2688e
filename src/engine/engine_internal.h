/* engine_internal.h - what an Engine holds (engine.h): the catalog, the weight store (mapped or
 * streamed) with its fetcher and router-trace wrappers, the compute pool, the device and the model.
 * For src/engine/ and the unit tests that look inside it only: callers (src/serve/, src/cli/) use
 * engine.h's functions, which scripts/check_layers.sh enforces. */
#ifndef DF_ENGINE_INTERNAL_H
#define DF_ENGINE_INTERNAL_H

#include "engine/engine.h"
#include "fetch/installer.h"
#include "format/catalog.h"
#include "store/fetching.h"
#include "store/i8spine.h"
#include "store/mapped.h"
#include "store/replay.h"
#include "store/stream.h"
#include "store/trace.h"

struct Engine {
    EngineOptions opt;       /* as opened */
    Catalog cat;
    int streaming;           /* K3_STORE: 1 = stream (budgeted), 0 = mapped */
    MappedStore store;
    StreamStore stream;
    Installer *inst;         /* the install's manifest; NULL for a plain checkpoint directory */
    FetchingSource fetching; /* streaming install: fetches missing experts before they are read */
    TraceSource trace;       /* K3_TRACE: wraps the expert source */
    ReplaySource replay;     /* K3_REPLAY: wraps it outermost */
    SpineSource *spine;      /* the store's spine */
    ExpertSource *experts;
    ModelStats prof_stats;   /* totals at the previous profile line */
    StreamCounters prof_io;
    double prof_t;
    Pool *pool;
    Model *model;
    int threads;             /* compute threads the pool has */
    int max_context;         /* positions a State may hold (K3_CONTEXT, within the model's limit) */
    int window;              /* the most rows of a prefill pass (K3_PREFILL_WINDOW, or from the memory plan) */
    int device_open;         /* K3_DEV opened an accelerator (device.h), closed with the engine */
    int spine_on_device;     /* the layer pass's device has room for the whole spine: a streaming
                              * store pins none of it in RAM (the device keeps every layer) */
    I8Spine i8;              /* K3_SPINE: mapped int8 spine when spine_int8 */
    int spine_int8;          /* 1: the spine matrices are the lossy int8 ones */
    int top_k_full;          /* the checkpoint's experts per token; cat.cfg.top_k is K3_MOE_TOP_K's */
    int slots;               /* sequences the memory plan holds (EngineOptions.slots, resolved) */
    char slots_how[96];      /* how slots was chosen, for the start-up line */
    char fingerprint[65];    /* the weights' fingerprint (statefile.h), computed when first asked for; "" until then */
};

/* The profile and the store statistics (report.c), called by the Session and stats.c. */
/* The profile's baseline: the totals now (engine_open sets it once loading is done). */
void engine_profile_start(Engine *e);
/* K3_PROFILE: one line per call (the Session calls it after each forward): positions, bytes read,
 * cache hits, waits and compute time since the previous line. No-op when off. */
void engine_profile_step(Engine *e, FILE *f);
/* --stats, streaming store only: bytes read (spine, experts, per position), expert cache hits,
 * prefetches started and used, time spent waiting for the spine. No-op when mapped. */
void engine_print_store_stats(const Engine *e, FILE *f);

#endif

/* engine.h - a checkpoint opened into a ready model: the catalog, the weight store (mapped or
 * streamed, with on-demand fetching and router traces around its experts), the compute pool and
 * device, and the model itself. Every command that computes (run, chat, serve, bench's children,
 * logits, nll, convert-spine) opens one; decoding goes through a Session (session.h) over it.
 *
 * engine_open allocates the Engine and engine_close frees it with everything it opened. Callers
 * see it through the functions below only (its struct is src/engine/'s: engine_internal.h); what
 * they hand out (the model, engine_info's strings) is the Engine's, valid until engine_close. One
 * forward at a time: the States of several sequences may share it (model.h). */
#ifndef DF_ENGINE_H
#define DF_ENGINE_H

#include <stdio.h>

#include "fetch/source.h"
#include "kernels/device.h"
#include "model/model.h"
#include "store/options.h"
#include "text/tokenizer.h"
#include "text/tokids.h"

typedef enum { SPINE_AUTO, SPINE_INT8, SPINE_BF16 } SpineChoice;

/* What the engine's settings say, validated by the caller (the CLI's settings table); the
 * strings are borrowed for the Engine's lifetime. */
typedef struct {
    int threads;             /* K3_THREADS: compute threads; 0: every core */
    int context;             /* K3_CONTEXT: positions a sequence may hold; 0: the MLA layout's default */
    int window;              /* K3_PREFILL_WINDOW: the most rows of a prefill pass; 0: sized from the memory plan */
    MlaCacheMode mla_cache;  /* K3_MLA_CACHE */
    ALogMode a_log;          /* K3_A_LOG */
    int top_k;               /* K3_MOE_TOP_K: experts per token (at most the model's); 0: the model's */
    SpineChoice spine;       /* K3_SPINE: AUTO takes the int8 spine when all of it is converted */
    int spec;                /* K3_SPEC: Sessions speculate (spec.h) */
    int offline;             /* K3_OFFLINE: a missing expert of a streaming install is an error */
    int profile;             /* K3_PROFILE: one line per forward on stderr */
    const char *trace;       /* K3_TRACE: router trace file (store/trace.h), or NULL */
    const char *replay;      /* K3_REPLAY: a router trace whose choices replace the router's
                              * (store/replay.h; a benchmark: the output is meaningless), or NULL */
    int replay_lookahead;    /* K3_REPLAY_LOOKAHEAD: router lookahead simulated on the replay at this
                              * recall in percent; -1: none */
    DeviceKind device;       /* K3_DEV */
    DevicePass device_pass;  /* K3_DEV_PASS: decode steps layer by layer on the device, or only its products */
    uint64_t device_expert_bytes; /* K3_DEV_EXPERT_GB: device memory experts may take; UINT64_MAX: all there is */
    HostExperts host_experts; /* K3_DEV_HOST_EXPERTS: experts the device does not hold, copied or on the CPU */
    int device_graphs;       /* K3_DEV_GRAPHS: the layer pass's decode steps replayed as CUDA graphs */
    int device_tensor_cores; /* K3_DEV_TENSOR_CORES: the layer pass's many-row products on the tensor cores */
    const char *kernels;     /* K3_KERNELS: kern_select's name */
    StoreOptions store;      /* K3_STORE and the streaming store's settings */
    FetchOptions fetch;      /* where a streaming install fetches missing experts from */
    int extra_states;        /* decode States the caller keeps per sequence besides its working one
                              * (the server's prompt snapshot): the streaming memory plan counts them */
    int slots;               /* sequences decoded at once (engine/scheduler.h), each a Session with
                              * 1 + extra_states States: the plan counts them all. 0: one;
                              * ENGINE_SLOTS_AUTO: as many as a quarter of the memory budget holds,
                              * 1..ENGINE_SLOTS_AUTO_MAX. extra_states and slots are not settings */
    const char *model_note;  /* how the caller found the model, for the start-up line ("the bundled
                              * k3-mini: ..."), or NULL. Not a setting */
    const char *decoding;    /* how the caller chooses tokens, for the start-up line; NULL: "greedy"
                              * (the exact default). Not a setting */
} EngineOptions;

#define ENGINE_SLOTS_AUTO (-1)
#define ENGINE_SLOTS_AUTO_MAX 8

/* An opened checkpoint. Opaque: its callers see it through the functions below (the stores, the
 * fetcher and the device it holds are the engine's own: engine_internal.h, for src/engine/). */
typedef struct Engine Engine;

/* What callers may know of an opened Engine, filled by engine_info. The strings are the Engine's,
 * valid until engine_close. */
typedef struct {
    const char *dir;         /* the checkpoint's directory */
    int vocab;               /* token ids are 0..vocab-1 */
    int eos_id;              /* the end-of-sequence token id */
    int max_context;         /* positions a State may hold (K3_CONTEXT, within the model's limit) */
    int slots;               /* sequences the memory plan holds (EngineOptions.slots, resolved) */
    const char *slots_how;   /* how slots was chosen, for the start-up line */
    int streaming;           /* the weights stream within a memory budget (K3_STORE); 0: mapped */
    /* what changes the numbers (a saved State is only valid under the same) */
    MlaCacheMode mla_cache;  /* K3_MLA_CACHE */
    ALogMode a_log;          /* K3_A_LOG */
    int top_k;               /* experts per token (K3_MOE_TOP_K, or the checkpoint's) */
    int top_k_full;          /* the checkpoint's experts per token */
    int spine_int8;          /* the spine matrices are the lossy int8 ones (K3_SPINE) */
    uint64_t int8_spine_bytes; /* bytes of the int8 spine as the store holds it; 0 with the bf16 one */
} EngineInfo;

/* The streaming store's reads since the Engine opened; all zero when the weights are mapped. */
typedef struct {
    uint64_t spine_bytes, expert_bytes; /* bytes read from the checkpoint */
    uint64_t expert_hits, expert_misses; /* experts found in the expert cache, and read on demand */
} EngineReads;

/* Opens the checkpoint in dir with the options (copied). Returns the Engine, or NULL with a message. */
Engine *engine_open(const char *dir, const EngineOptions *o);
/* Releases everything and frees e (NULL: nothing to do); -1 with a message when the router trace
 * (K3_TRACE) could not be written completely (the command must fail). */
int engine_close(Engine *e);

/* The checkpoint, the vocabulary, the limits and the numerics the Engine runs with. */
void engine_info(const Engine *e, EngineInfo *info);
/* The model, for its States (state_create) and sizes (model_max_rows, state_saved_bytes); the
 * Engine owns it. One forward at a time runs on it (model.h). */
Model *engine_model(const Engine *e);
/* The streaming store's counters now (read under the stores' locks). */
EngineReads engine_reads(const Engine *e);
/* The start-up lines: one with every resolved setting, then the streaming plan when streaming
 * and the install's reminder when it lacks experts. */
void engine_print_settings(const Engine *e, FILE *f);
/* The short start-up line: the model, the device and threads, and whether decoding is exact or
 * which lossy modes are on (then the same warnings and reminders as the full one). */
void engine_print_summary(const Engine *e, FILE *f);

/* What engine_convert_spine did: of total spine tensors, converted were written now and skipped
 * had a whole, current file; bf16_bytes is the size of all of them as BF16. */
typedef struct {
    int converted, skipped, total;
    uint64_t bf16_bytes;
} SpineConversion;
/* convert-spine: writes the int8 spine (store/i8spine.h) beside the checkpoint, from an Engine
 * opened with the mapped store and the BF16 spine. Resumable: each tensor's file is written whole
 * and renamed into place, a whole current one is skipped, a damaged one rewritten (said on log).
 * Returns 0, or -1 with a message (r then counts what was done before). */
int engine_convert_spine(Engine *e, FILE *log, SpineConversion *r);

/* Loads the checkpoint's tokenizer and checks it covers the model's vocabulary. */
Tokenizer *engine_tokenizer(const Engine *e);
/* Encodes untrusted text (special spellings are ordinary text). Returns the count or -1. */
int engine_encode_text(const Engine *e, const Tokenizer *tok, const char *text, size_t len, int **ids);

/* Polled between prefill chunks and before each decode step; nonzero cancels. */
typedef int (*CancelFn)(void *ctx);

/* How engine_feed walks a token sequence. */
typedef struct {
    int chunk;          /* positions per forward, 1..the prefill window (model_max_rows); 0: the window */
    int all_rows;       /* 1: logits of every position of a chunk; 0: of its last position only */
    float *rows;        /* where each chunk's logits go: [chunk][vocab] (all_rows) or [vocab]; NULL: none */
    CancelFn cancel;    /* polled before each chunk and between its layers (a cancel there stops the
                         * chunk on the CPU device, st as before it; an accelerator finishes the
                         * chunk first), or NULL */
    void *cancel_ctx;
    /* called after each chunk with its first position in the sequence, its size and its logits
     * (rows); nonzero fails the feed. NULL: nothing to do */
    int (*chunk_done)(void *ctx, size_t at, int T, const float *rows);
    void *ctx;
    /* called between the layers of each chunk, before cancel, with the tokens of n done so far, a
     * chunk's finished layers counted pro rata (a window of thousands of rows takes a while), on
     * the feeding thread; NULL: none */
    void (*progress)(void *ctx, size_t done);
} FeedOptions;

/* Feeds tokens[0..n) after what st holds, in chunks of at most o->chunk positions. The short
 * chunk goes first, so a feed cancelled between chunks has not started on its last o->chunk
 * tokens; chunking never changes a bit of the result (model.h). Returns 0, 1 when cancelled
 * (st keeps the chunks that completed: a chunk stopped between its layers is undone), or -1
 * with a message. */
int engine_feed(Engine *e, State *st, const int32_t *tokens, size_t n, const FeedOptions *o);

#endif

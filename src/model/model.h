/* model.h - the K3 forward pass (docs/MODEL.md section 4) for a chunk of T positions.
 *
 * A Model binds a validated catalog to weights: the spine through a SpineSource (into Weights) and
 * the routed experts through an ExpertSource, all of them ready Mats from the stores, so the model
 * knows no storage format; it owns the scratch buffers of one chunk. A State is one sequence's
 * decode state (KDA conv windows and recurrent matrices, MLA key/value cache); several States can
 * share a Model as long as only one forward runs at a time. Everything is fp32; results do not
 * depend on the number of threads, and feeding a sequence in chunks of any size gives the same
 * greedy tokens and logits equal up to fp32 reduction order (bit-identical where the kernels are,
 * see kernels.h). */
#ifndef DF_MODEL_H
#define DF_MODEL_H

#include <stdint.h>

#include "format/catalog.h"
#include "model/cache_index.h"
#include "model/weights.h"
#include "util/pool.h"

/* One routed expert as the store hands it out: gate w1 and up w3 [moe_inter][latent], down w2
 * [latent][moe_inter] (MXFP4 on K3), each with its residency key (mat.h). */
typedef struct {
    Mat w1, w2, w3;
} ExpertMats;

/* Supplies routed experts. acquire makes experts ids[0..n) of `layer` readable and stores each
 * one's matrices in out[i]; they stay valid until the next acquire. Returns 0, or -1 with a
 * message (the forward then fails). max_batch > 0 caps n (the model then acquires a layer's
 * experts in several batches); 0 means no cap. route, when not NULL, is told each layer's
 * selections before its experts are acquired: sel[t][k] for the pass's T rows (router traces);
 * the model then acquires each distinct expert once, ascending (unless ready_first reorders).
 * predict, when not NULL, is told a guess at a later layer's selections (router lookahead), in the
 * same form, for passes of at most MODEL_MAX_VERIFY rows; the source may start reading them, and
 * must keep serving the current layer's experts as if it had not been told. replace, when not
 * NULL, overwrites the router's selections (distinct ids per row) and weights before route sees
 * them, for the pass's rows at positions
 * pos .. pos + T - 1: a benchmark that drives the store with recorded routing (replay.h); the
 * model's output is then meaningless. ready_first, when not NULL, may reorder ids[0..n) (a
 * layer's experts not yet acquired) so that those readable without waiting come first: the model
 * computes experts in any order (each writes its own outputs), so it computes what has arrived
 * while the rest is still being read; it returns nonzero when ids[0] (after the reordering) is
 * readable now. */
typedef struct ExpertSource {
    int (*acquire)(struct ExpertSource *src, int layer, const int *ids, int n, ExpertMats *out);
    int max_batch;
    int in_place; /* 1 when acquire only points into memory that stays readable (a mapped file): a
                   * device may then copy every expert ahead of its use (model_use_device) */
    void (*route)(struct ExpertSource *src, int layer, const int *sel, int T, int k);
    void (*predict)(struct ExpertSource *src, int layer, const int *sel, int T, int k);
    void (*replace)(struct ExpertSource *src, int layer, int pos, int *sel, float *weights, int T, int k);
    int (*ready_first)(struct ExpertSource *src, int layer, int *ids, int n);
} ExpertSource;

/* Supplies every other tensor (the spine: the embedding, the layers' matrices and vectors, the
 * tail). mat gives tensor t as a ready matrix: format, shape, bytes and residency key, chosen by
 * the store (BF16 or F32 as in the checkpoint, or the int8 spine's I8ROW); its data is NULL while t
 * belongs to a streamed layer that is not acquired. Vectors are matrices too, expanded by the
 * model at load.
 * acquire_layer (NULL: every layer is always readable) makes layer l's tensors readable until
 * release_layer(l), and returns 1 when their Mats may have changed since the previous acquire
 * (the model then asks mat again), 0 when they have not, -1 with a message on failure. The model
 * holds at most one layer at a time and releases it before acquiring the next.
 * held_elsewhere (NULL: nothing to say) tells a store that reads layers ahead that the model keeps
 * a copy of layer l elsewhere (the GPU's) and will not acquire it on its usual path: the store stops
 * reading it ahead. */
typedef struct SpineSource {
    Mat (*mat)(struct SpineSource *src, const TensorInfo *t);
    int (*acquire_layer)(struct SpineSource *src, int layer);
    void (*release_layer)(struct SpineSource *src, int layer);
    void (*held_elsewhere)(struct SpineSource *src, int layer);
    int resident_layers;    /* layers [0, resident_layers) never move: readable at any time */
} SpineSource;

/* The layer pass's expert cache in device memory (model/devcache.h), counted over routed experts. */
typedef struct {
    uint64_t hits;       /* in a slot, copied from the bytes the source hands out now */
    uint64_t misses;     /* the others: copied into a slot, computed by the CPU threads, or copied for the one use */
    uint64_t admitted;   /* copies into a slot (misses the cache takes) */
    uint64_t evictions;  /* admissions that replaced another expert */
    uint64_t recopies;   /* admissions of an expert its slot held from bytes the source has since refilled */
} DevCacheCounts;

/* Time and bytes per phase, accumulated over forwards (model_stats_reset clears). */
typedef struct {
    double attention_s, ffn_s, spine_wait_s, expert_wait_s, experts_s, head_s, other_s;
    double route_s;                   /* in ExpertSource.route (a streaming store starts its reads there) */
    double first_wait_s;              /* of expert_wait_s, each layer's first wait for an expert that was not
                                       * readable yet (ready_first): the latency of its reads that nothing
                                       * overlapped; the rest is waiting for the reads after it */
    uint64_t expert_bytes, spine_bytes;
    uint64_t positions, forwards;
    uint64_t stopped;                 /* forwards stopped between layers (model_watch_layers), undone */
    uint64_t look_routed, look_hits;  /* router lookahead: experts routed in guessed layers, and guessed */
    uint64_t experts_cpu, experts_copied; /* layer pass: experts it did not hold, run on the CPU or copied */
    uint64_t dev_forwards;            /* layer pass: forwards it ran (of forwards) */
    uint64_t dev_graphs;              /* layer pass: stretches between waits run as CUDA graphs */
    uint64_t state_syncs;             /* layer pass: times a State's arrays were copied to or from the device */
    DevCacheCounts dev_cache;
} ModelStats;

/* The rows of a pass. A prefill pass takes up to the model's window (model_max_rows, chosen at
 * model_create: the memory plan sizes it), so that each layer reads each routed expert once for the
 * whole window; decode steps take one row, verify passes at most MODEL_MAX_VERIFY, and a batch of
 * several sequences (the server's) at most MODEL_BATCH_ROWS. MODEL_LOGIT_ROWS: the logits a pass
 * computes at a time (a pass that wants more computes them in groups). */
#define MODEL_BATCH_ROWS 64
#define MODEL_LOGIT_ROWS 64
#define MODEL_MAX_WINDOW 65535 /* (an accelerator launches some of a pass's row loops as one grid dimension) */

typedef struct Model Model;
typedef struct State State;

/* How MLA layers cache past positions (docs/MODEL.md 4.4, 5.1). LATENT (the default): per position the
 * normalised latent c and the raw k_pe (kv_lora + qk_rope floats: 2,304 B per layer on K3), with
 * each head's query absorbed into kv_b's key rows and its output expanded through kv_b's value
 * rows. EXPANDED: every head's full key and value (30,720 floats per layer on K3, 53x more), the
 * reference layout. Both use the same exactly expanded fp32 weights; they differ only in fp32
 * reduction order (each is deterministic, and both match the fp64 reference within tolerance). */
typedef enum { MLA_CACHE_LATENT, MLA_CACHE_EXPANDED } MlaCacheMode;

/* Borrows cat, the spine and the experts (their stores) and pool for its lifetime; binds every
 * spine tensor now (vectors are copied, so a store may free them after this). max_context:
 * positions a State may hold (model_context: clamped to max_position_embeddings); mla: how MLA
 * layers cache past positions; max_rows: the most rows of a pass (model_window). The model runs its layers on the CPU device (kernels/cpu/) until
 * model_use_device gives it an accelerator. */
int model_create(Model **out, const Catalog *cat, SpineSource *spine, ExpertSource *experts, Pool *pool, ALogMode mode,
                 int max_context, MlaCacheMode mla, int max_rows);
/* The most rows a pass may have (1..MODEL_MAX_WINDOW, at least MODEL_BATCH_ROWS unless the context
 * is smaller): model_create's max_rows within the context. */
int model_max_rows(const Model *m);
void model_destroy(Model *m);
const K3Config *model_config(const Model *m);
int model_max_context(const Model *m);
/* The positions a State of a model of config c may hold when asked for `asked` (at least 1, at
 * most the config's max_position_embeddings). */
int model_context(const K3Config *c, int asked);
ModelStats *model_stats(Model *m);

State *state_create(const Model *m);
void state_destroy(State *s);
void state_reset(State *s);
int state_length(const State *s);
/* Copies src into dst (same model): for snapshots and rollback. Returns 0, or -1 with a message
 * when dst cannot hold src's positions (never for two States of one model). */
int state_copy(State *dst, const State *src);
/* The same when dst already holds src's first `same` positions (both were fed the same first
 * `same` tokens: an MLA row depends only on the tokens up to its position), which are then not
 * copied again: a snapshot of a growing conversation copies only its new rows. */
int state_copy_from(State *dst, const State *src, int same);
/* 1 when two States of the same model hold bit-identical state (length, KDA conv windows and
 * recurrent matrices, MLA caches), else 0. */
int state_equal(const State *a, const State *b);

/* A State as bytes, for saving a conversation with its state (chat's /save): per layer in order,
 * a KDA layer's conv windows and recurrent matrices, an MLA layer's cache rows [0, length), fp32
 * as in memory. The State must be settled (no verification pending: session_settle).
 * state_saved_bytes: their size for a State of m holding len positions. */
uint64_t state_saved_bytes(const Model *m, int len);
int state_save(const State *s, int (*put)(void *ctx, const void *p, size_t n), void *ctx);
/* Replaces s's contents with len positions read through get, as state_save wrote them for a
 * State of the same model (config and MLA layout). Every value must be finite. Returns 0, or -1
 * with a message (s is then reset). */
int state_load(State *s, int len, int (*get)(void *ctx, void *p, size_t n), void *ctx);

/* Runs tokens[0..T) (1 <= T <= model_max_rows) after the state's current positions and advances
 * it. logits: NULL, or [T][vocab] when all_rows, else [vocab] for the last position only.
 * Fails (state unchanged only on argument errors) on a bad token id, a full context, an expert
 * that cannot be read, a device fault (device.h), or non-finite logits. */
int model_forward(Model *m, State *s, const int *tokens, int T, float *logits, int all_rows);

/* Several sequences in one pass: states[q] is fed its rows_per_state[q] tokens, taken in order
 * from tokens (sequence 0's first), sum of rows 1..model_max_rows, n at most MODEL_BATCH_ROWS, each
 * state at most once.
 * Every weight product runs once over all the rows, each routed expert is acquired once for all
 * the rows that chose it; attention (KDA recurrence, MLA cache) runs per sequence on its own
 * rows. A row's logits are bit-identical to those a model_forward of its sequence alone gives
 * (the kernels compute every row independently). logits: NULL, or [all rows][vocab] when
 * all_rows, else [n][vocab], each sequence's last row. Fails like model_forward (states
 * unchanged on argument errors). */
int model_forward_batch(Model *m, State *const *states, const int *tokens, const int *rows_per_state, int n,
                        float *logits, int all_rows);

/* Speculative verification: like model_forward with every row's logits ([T][vocab]), T <=
 * MODEL_MAX_VERIFY, but the state also keeps what state_commit needs to keep only a prefix of
 * the rows. Any later forward (or state_commit) ends the verification. */
#define MODEL_MAX_VERIFY 9
int model_forward_verify(Model *m, State *s, const int *tokens, int T, float *logits);

/* While set, every forward calls fn after each of its layers but the last (layer 0..n_layers-2), on
 * the forward's own thread: how far a long prefill window has come (a progress display), and
 * whether to stop. fn must not call into the Model. When fn returns nonzero and the forward is one
 * sequence's on the CPU device, the forward stops there and returns MODEL_STOPPED with the State
 * exactly as it was before the forward (its KDA states were kept aside for that, one copy of them,
 * made on first use; the MLA caches' new rows lie past the State's length until a forward
 * completes). An accelerator's forward (whose States live in its memory) does not stop: it
 * completes and the caller sees the request at its next chance. NULL stops watching. */
#define MODEL_STOPPED 1
void model_watch_layers(Model *m, int (*fn)(void *ctx, int layer, int n_layers), void *ctx);
/* Keeps the first n (1..T) rows of the last model_forward_verify: afterwards the state is
 * bit-identical to one that was fed only those n tokens. No-op without a pending verification. */
void state_commit(State *s, int n);

/* Gives the model the process's accelerator (device_current) for its layers, when it offers
 * whole-layer operations (kernels/devops.h) and supports the model's MLA layout: allocates the
 * activations there, copies the small vectors and the spine's matrices (a streamed layer is read
 * once for it: one the device keeps is not read again), and makes an expert cache of as many slots
 * as the device has room for (experts leave room for the spine, and take at most its expert_bytes),
 * run by `policy`, the host store's (model/devcache.h). When the source is in_place and every expert
 * fits, they are all copied now; otherwise the cache starts empty and takes the experts the passes
 * copy. A State's arrays (and a verify pass's replay records) then live on the device between
 * forwards and come back whenever the host reads them. Without such an accelerator nothing changes:
 * the CPU device runs the layers (its products on the process's device, if any). Call before any
 * State of the model exists. Returns 0, or -1 with a message (the CPU device then runs the layers).
 * model_release_device goes back to the CPU device (before the accelerator closes; every State of
 * the model must be destroyed first). */
/* How an accelerator runs routed experts its cache does not hold: copied into the cache (COPY),
 * computed by the CPU threads from host memory while the device computes the rest and copied into
 * the cache meanwhile (CPU), or split between the two in the proportion of their measured seconds
 * per expert, the policy's likeliest to be used again copied into the cache and the rest computed by
 * the CPU (AUTO; both are measured again now and then). K3_DEV_HOST_EXPERTS. */
typedef enum { HOST_EXPERTS_AUTO, HOST_EXPERTS_COPY, HOST_EXPERTS_CPU } HostExperts;
int model_use_device(Model *m, HostExperts way, CachePolicy policy);
void model_release_device(Model *m);
/* Spine layers the accelerator holds (read at model_use_device), or -1 when the CPU device runs the
 * layers. */
int model_spine_held(const Model *m);
/* The accelerator's expert cache: its slots (0: none), or -1 when the CPU device runs the layers;
 * *holds_all: it holds every routed expert (copied at start-up). */
int model_device_slots(const Model *m, int *holds_all);

/* Greedy choice over logits: the largest, lowest index on ties. */
int model_argmax(const Model *m, const float *logits);

MlaCacheMode model_mla_cache(const Model *m);
/* Bytes one position adds to a State's MLA caches (all MLA layers). */
uint64_t model_mla_bytes_per_position(const K3Config *c, MlaCacheMode mode);

/* What a Model and its States allocate besides the weights: exactly what model_create, a State
 * filled to the context, and its first model_forward_verify allocate. The streaming memory plan
 * (store/stream.h) reserves these. */
typedef struct {
    uint64_t model;      /* the Model and its host scratch (staging of a pass's rows, routing), and the
                          * copy of one State's KDA states a stoppable window keeps */
    uint64_t hybrid;     /* beside an accelerator: the CPU threads' buffers for the experts it misses */
    uint64_t scratch;    /* the device's scratch (activations of a pass's rows, scores): host memory
                          * when the CPU device runs the layers */
    uint64_t state;      /* one State holding max_context positions: KDA windows and matrices, the MLA cache */
    uint64_t verify;     /* a State's speculation replay records */
} ModelMemory;
/* For a model of config c with the MLA layout mla, max_context positions (model_context) and passes
 * of up to max_rows rows (model_window). */
ModelMemory model_memory(const K3Config *c, MlaCacheMode mla, int max_context, int max_rows);
/* The rows of a pass model_create takes for max_rows (0: MODEL_BATCH_ROWS) within max_context. */
int model_window(const K3Config *c, int max_context, int max_rows);
/* Bytes one more row of the window adds to model_memory's model + scratch (+ hybrid when asked):
 * what the memory plan sizes the window with. */
uint64_t model_row_bytes(const K3Config *c, MlaCacheMode mla, int hybrid);

#endif

/* model.h - the K3 forward pass (k3-model.md section 3) for a chunk of T positions.
 *
 * A Model binds a validated catalog to weights (spine through Weights, routed experts through an
 * ExpertSource) and owns the scratch buffers of one chunk. A State is one sequence's decode state
 * (KDA conv windows and recurrent matrices, MLA key/value cache); several States can share a Model
 * as long as only one forward runs at a time. Everything is fp32; results do not depend on the
 * number of threads, and feeding a sequence in chunks of any size gives the same greedy tokens and
 * logits equal up to fp32 reduction order (bit-identical where the kernels are, see kernels.h). */
#ifndef DF_MODEL_H
#define DF_MODEL_H

#include <stdint.h>

#include "format/catalog.h"
#include "model/weights.h"
#include "util/pool.h"

/* Supplies routed experts. acquire makes the spans of experts ids[0..n) of `layer` readable and
 * stores a pointer to each span (catalog layout) in spans[i]; the pointers stay valid until the
 * next acquire. Returns 0, or -1 with a message (the forward then fails). max_batch > 0 caps n
 * (the model then acquires a layer's experts in several batches); 0 means no cap. route, when
 * not NULL, is told each layer's selections before its experts are acquired: sel[t][k] for the
 * chunk's T rows (router traces). predict, when not NULL, is told a guess at a later layer's
 * selections (router lookahead), in the same form; the source may start reading them, and must
 * keep serving the current layer's experts as if it had not been told. replace, when not NULL,
 * overwrites the router's selections (distinct ids per row) and weights before route sees them,
 * for the chunk's rows at positions pos .. pos + T - 1: a benchmark that drives the store with
 * recorded routing (replay.h); the model's output is then meaningless. ready_first, when not
 * NULL, may reorder ids[0..n) (a layer's experts not yet acquired) so that those readable without
 * waiting come first: the model computes experts in any order (each writes its own outputs), so
 * it computes what has arrived while the rest is still being read. */
typedef struct ExpertSource {
    int (*acquire)(struct ExpertSource *src, int layer, const int *ids, int n, const uint8_t **spans);
    int max_batch;
    void (*route)(struct ExpertSource *src, int layer, const int *sel, int T, int k);
    void (*predict)(struct ExpertSource *src, int layer, const int *sel, int T, int k);
    void (*replace)(struct ExpertSource *src, int layer, int pos, int *sel, float *weights, int T, int k);
    void (*ready_first)(struct ExpertSource *src, int layer, int *ids, int n);
} ExpertSource;

/* Supplies the spine one layer at a time when it is not all resident. acquire_layer makes layer
 * l's tensors readable through bytes (provider = the source) until release_layer(l), and returns
 * 1 when they may sit elsewhere than at the previous acquire (the model then rebinds the layer's
 * matrices), 0 when they have not moved, -1 with a message on failure. The model holds at most
 * one layer at a time and releases it before acquiring the next. */
typedef struct SpineSource {
    int (*acquire_layer)(struct SpineSource *src, int layer);
    void (*release_layer)(struct SpineSource *src, int layer);
    TensorBytesFn bytes;
    MatOverrideFn mat;      /* NULL, or another representation of some matrices (the int8 spine) */
    void *mat_ctx;
    int resident_layers;    /* layers [0, resident_layers) never move: readable at any time */
} SpineSource;

/* Time and bytes per phase, accumulated over forwards (model_stats_reset clears). */
typedef struct {
    double attention_s, ffn_s, spine_wait_s, expert_wait_s, experts_s, head_s, other_s;
    double route_s;                   /* in ExpertSource.route (a streaming store starts its reads there) */
    uint64_t expert_bytes, spine_bytes;
    uint64_t positions, forwards;
    uint64_t look_routed, look_hits;  /* router lookahead: experts routed in guessed layers, and guessed */
} ModelStats;

#define MODEL_MAX_CHUNK 64
/* The most distinct experts one chunk routes to in a layer (every row its own top-k). */
#define MODEL_MAX_ROUTED (MODEL_MAX_CHUNK * K3_MAX_TOP_K)

typedef struct Model Model;
typedef struct State State;

/* Borrows cat, spine tensor bytes (through bytes/provider), experts and pool for its lifetime.
 * max_context: positions a State may hold (model_context: clamped to max_position_embeddings). */
int model_create(Model **out, const Catalog *cat, TensorBytesFn bytes, void *provider, ExpertSource *experts,
                 Pool *pool, ALogMode mode, int max_context);
/* Streams the spine through src (borrowed): every forward acquires each layer before using it,
 * and binds the matrices through src->mat where it has one. Without it, the matrices bound at
 * model_create stay in place. */
int model_set_spine(Model *m, SpineSource *src);
/* Rebinds the spine matrices through an override (weights_override_mats; bytes/provider as given
 * to model_create), e.g. to the mapped int8 spine. A streamed spine brings its own (SpineSource.mat). */
int model_override_mats(Model *m, TensorBytesFn bytes, void *provider, MatOverrideFn fn, void *ctx);
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

/* Runs tokens[0..T) (1 <= T <= MODEL_MAX_CHUNK) after the state's current positions and advances
 * it. logits: NULL, or [T][vocab] when all_rows, else [vocab] for the last position only.
 * Fails (state unchanged only on argument errors) on a bad token id, a full context, an expert
 * that cannot be read, a device fault (device.h), or non-finite logits. */
int model_forward(Model *m, State *s, const int *tokens, int T, float *logits, int all_rows);

/* Several sequences in one pass: states[q] is fed its rows_per_state[q] tokens, taken in order
 * from tokens (sequence 0's first), sum of rows 1..MODEL_MAX_CHUNK, each state at most once.
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
/* Keeps the first n (1..T) rows of the last model_forward_verify: afterwards the state is
 * bit-identical to one that was fed only those n tokens. No-op without a pending verification. */
void state_commit(State *s, int n);

/* Greedy choice over logits: the largest, lowest index on ties. */
int model_argmax(const Model *m, const float *logits);

/* How MLA layers cache past positions (k3-model.md 3.4). LATENT (the default): per position the
 * normalised latent c and the raw k_pe (kv_lora + qk_rope floats: 2,304 B per layer on K3), with
 * each head's query absorbed into kv_b's key rows and its output expanded through kv_b's value
 * rows. EXPANDED: every head's full key and value (30,720 floats per layer on K3, 53x more), the
 * reference layout. Both use the same exactly expanded fp32 weights; they differ only in fp32
 * reduction order (each is deterministic, and both match the fp64 reference within tolerance). */
typedef enum { MLA_CACHE_LATENT, MLA_CACHE_EXPANDED } MlaCacheMode;
/* Call before any State of the model exists. */
void model_set_mla_cache(Model *m, MlaCacheMode mode);
MlaCacheMode model_mla_cache(const Model *m);
/* Bytes one position adds to a State's MLA caches (all MLA layers). */
uint64_t model_mla_bytes_per_position(const K3Config *c, MlaCacheMode mode);

/* What a Model and its States allocate besides the weights: exactly what model_create, a State
 * filled to the context, and its first model_forward_verify allocate. The streaming memory plan
 * (store/stream.h) reserves these. */
typedef struct {
    uint64_t model;      /* the Model: its chunk scratch (activations of MODEL_MAX_CHUNK rows, scores) */
    uint64_t state;      /* one State holding max_context positions: KDA windows and matrices, the MLA cache */
    uint64_t verify;     /* a State's speculation replay records */
} ModelMemory;
/* For a model of config c with the MLA layout mla and max_context positions (model_context). */
ModelMemory model_memory(const K3Config *c, MlaCacheMode mla, int max_context);

#endif

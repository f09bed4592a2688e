#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/session.h"
#include "kernels/device.h"
#include "kernels/devops.h"
#include "kernels/kernels.h"
#include "store/budget.h"
#include "util/clock.h"
#include "util/err.h"

#define DEFAULT_CONTEXT_LATENT 65536
#define DEFAULT_CONTEXT_EXPANDED 4096

/* The default context follows the MLA cache's size per position, which the streaming memory plan
 * reserves for the whole context: 2,304 B per layer latent (65,536 positions are 3.6 GB on K3),
 * 122,880 B expanded (4,096 positions: 12.1 GB). */
static int default_context(MlaCacheMode mla) {
    return mla == MLA_CACHE_LATENT ? DEFAULT_CONTEXT_LATENT : DEFAULT_CONTEXT_EXPANDED;
}

/* K3_MOE_TOP_K=N: route each token to its N best experts only (renormalised over them). */
static int apply_top_k(Engine *e) {
    K3Config *c = &e->cat.cfg;
    int n = e->opt.top_k;
    e->top_k_full = c->top_k;
    if (n == 0) return 0;
    if (n < 1 || n > c->top_k)
        return df_fail("K3_MOE_TOP_K: '%d' is not an expert count in 1..%d (the model's num_experts_per_token)", n,
                       c->top_k);
    c->top_k = n;
    return 0;
}

/* K3_SPINE=auto|int8|bf16: auto takes the int8 spine when convert-spine has written all of it.
 * Decided before the store opens: a streamed spine plans and reads the int8 files itself. */
static int spine_choice(Engine *e) {
    if (e->opt.spine == SPINE_BF16) return 0;
    int done, total;
    if (i8spine_converted(&e->cat, &done, &total)) return -1;
    int full = total > 0 && done == total;
    if (!full && e->opt.spine == SPINE_INT8)
        return df_fail("K3_SPINE=int8: %d of %d spine tensors are converted in %s/%s: "
                       "run deltafin convert-spine --model %s",
                       done, total, e->cat.dir, I8SPINE_SUBDIR, e->cat.dir);
    e->spine_int8 = full;
    return 0;
}

/* The mapped store's int8 spine: every file mapped, handed out in place of the BF16 matrices. */
static int map_int8_spine(Engine *e) {
    if (!e->spine_int8 || e->streaming) return 0;
    if (i8spine_open(&e->i8, &e->cat)) return -1;
    mapped_use_int8(&e->store, &e->i8);
    return 0;
}

/* A streaming install (made by setup --stream) may lack experts, never the spine. K3_OFFLINE=1
 * forbids fetching: a missing expert is then an error. */
static int attach_install(Engine *e) {
    if (installer_attach(&e->inst, &e->cat, e->opt.offline ? INST_OFFLINE : INST_ONLINE, &e->opt.fetch)) return -1;
    if (installer_unmanaged(e->inst)) {
        installer_close(e->inst);
        e->inst = NULL;
        return 0;
    }
    FetchPlan spine = {0};
    plan_headers_and_spine(e->inst, &spine);
    int missing = spine.n;
    plan_free(&spine);
    if (missing)
        return df_fail("%s: the install is missing %d spine ranges: run `deltafin setup --root %s` to finish it", e->cat.dir,
                       missing, e->cat.dir);
    return 0;
}

/* What one decoded sequence holds: its States (the working one and the caller's extra ones) and
 * its Session. */
static uint64_t slot_bytes(const Engine *e, const ModelMemory *mm) {
    const int extra = e->opt.extra_states;
    return mm->state * (uint64_t)(1 + extra) + session_bytes(&e->cat.cfg, model_context(&e->cat.cfg, e->max_context), extra > 0);
}

/* Whether an accelerator will run the model's layers (model_use_device), rather than the CPU device. */
static int layers_on_device(const Engine *e) {
    const MatDevice *dev = device_current();
    return dev && dev->ops && e->opt.device_pass == PASS_LAYERS &&
           (e->opt.mla_cache == MLA_CACHE_LATENT || dev->ops->mla_expanded);
}

/* What decoding allocates besides the weights, as the owners count it: the model (and the layers'
 * scratch when the CPU device runs them: an accelerator's is its own memory), every slot's
 * States (snapshots are copies, never verified: no replay records) and Session, speculation's
 * replay records (one sequence speculates at a time), and with several slots the scheduler's
 * logits of a pass. */
static uint64_t compute_bytes(const Engine *e) {
    ModelMemory mm = model_memory(&e->cat.cfg, e->opt.mla_cache, e->max_context, e->window);
    uint64_t batch = e->slots > 1 ? sizeof(float) * (uint64_t)e->cat.cfg.vocab * MODEL_BATCH_ROWS : 0;
    uint64_t layers = layers_on_device(e) ? mm.hybrid : mm.scratch; /* (an accelerator's scratch is its own memory) */
    return mm.model + layers + slot_bytes(e, &mm) * (uint64_t)e->slots + (e->opt.spec ? mm.verify : 0) + batch;
}

/* The prefill window (EngineOptions.window): as given, or as many rows as fit in an eighth of the
 * memory budget (the CPU device's activations are host memory) or, when an accelerator runs the
 * layers, in half the device memory the spine and the States leave (its expert cache takes the
 * rest), at most WINDOW_AUTO_MAX and at least MODEL_BATCH_ROWS; never more than the context. */
#define WINDOW_AUTO_MAX 16384
static uint64_t device_state_bytes(const Engine *e);
static size_t spine_matrix_bytes(const Engine *e);
static int choose_window(Engine *e) {
    const K3Config *c = &e->cat.cfg;
    if (e->opt.window > 0) return e->window = model_window(c, e->max_context, e->opt.window), 0;
    uint64_t budget;
    char how[160];
    if (budget_detect(e->opt.store.ram_bytes, &budget, how, sizeof how)) return -1;
    const int device = layers_on_device(e);
    uint64_t rows = budget / 8 / (model_row_bytes(c, e->opt.mla_cache, device) + 1);
    if (device) { /* the device's scratch: half of what the spine and the States leave */
        const MatDevice *dev = device_current();
        const ModelMemory one = model_memory(c, e->opt.mla_cache, e->max_context, 1);
        const uint64_t taken = (uint64_t)spine_matrix_bytes(e) + device_state_bytes(e) + one.scratch;
        const uint64_t left = dev->weight_room > taken ? (dev->weight_room - taken) / 2 : 0;
        const uint64_t per = model_memory(c, e->opt.mla_cache, e->max_context, 2).scratch - one.scratch;
        if (left / (per + 1) < rows) rows = left / (per + 1);
    }
    if (rows > WINDOW_AUTO_MAX) rows = WINDOW_AUTO_MAX;
    e->window = model_window(c, e->max_context, rows < MODEL_BATCH_ROWS ? MODEL_BATCH_ROWS : (int)rows);
    return 0;
}

/* EngineOptions.slots: as given, or as many as a quarter of the memory budget holds (the rest is
 * for the weights: the spine, the expert cache). */
static int choose_slots(Engine *e) {
    if (e->opt.slots != ENGINE_SLOTS_AUTO) {
        e->slots = e->opt.slots > 0 ? e->opt.slots : 1;
        snprintf(e->slots_how, sizeof e->slots_how, "as asked");
        return 0;
    }
    uint64_t budget;
    char how[160];
    if (budget_detect(e->opt.store.ram_bytes, &budget, how, sizeof how)) return -1;
    ModelMemory mm = model_memory(&e->cat.cfg, e->opt.mla_cache, e->max_context, MODEL_BATCH_ROWS);
    uint64_t per = slot_bytes(e, &mm), fit = budget / 4 / (per ? per : 1);
    e->slots = fit < 1 ? 1 : fit > ENGINE_SLOTS_AUTO_MAX ? ENGINE_SLOTS_AUTO_MAX : (int)fit;
    snprintf(e->slots_how, sizeof e->slots_how, "a quarter of the %.2f GB budget at %.0f MB a slot", budget / 1e9, per / 1e6);
    return 0;
}

/* The weight store (K3_STORE), the on-demand fetch for a streaming install, with K3_TRACE the
 * router trace around its experts, and outermost, with K3_REPLAY, recorded routing in place of
 * the router's (a benchmark of the store: the output is meaningless). */
static int open_store(Engine *e) {
    if (attach_install(e)) return -1;
    StreamNeeds needs = {.int8_spine = e->spine_int8, .compute_bytes = compute_bytes(e), .spine_on_device = e->spine_on_device};
    if (stream_wanted(&e->cat, &needs, &e->opt.store, &e->streaming)) return -1;
    if (e->streaming) {
        int rc;
        while ((rc = stream_open(&e->stream, &e->cat, &needs, &e->opt.store)) && !e->opt.window && e->window > MODEL_BATCH_ROWS) {
            /* the automatic window left the plan too little: a smaller one (the same results, more passes) */
            e->window = e->window / 2 > MODEL_BATCH_ROWS ? e->window / 2 : MODEL_BATCH_ROWS;
            needs.compute_bytes = compute_bytes(e);
        }
        if (rc) return -1;
        e->spine = &e->stream.spine.src;
        e->experts = &e->stream.experts.src;
    } else {
        if (mapped_open(&e->store, &e->cat) || map_int8_spine(e)) return -1;
        e->spine = &e->store.spine;
        e->experts = &e->store.src;
    }
    if (e->inst) {
        fetching_wrap(&e->fetching, e->experts, e->inst);
        e->experts = &e->fetching.wrap.src;
    }
    if (e->opt.trace) {
        if (trace_open(&e->trace, e->experts, &e->cat.cfg, e->opt.trace)) return -1;
        e->experts = &e->trace.wrap.src;
    }
    if (e->opt.replay) {
        double recall = e->opt.replay_lookahead < 0 ? -1 : e->opt.replay_lookahead / 100.0;
        if (replay_open(&e->replay, e->experts, &e->cat.cfg, e->opt.replay, recall)) return df_failctx("K3_REPLAY");
        e->experts = &e->replay.wrap.src;
    }
    return 0;
}

/* Bytes of the spine's matrices as the device will hold them (BF16 or int8), from the catalog. */
static size_t spine_matrix_bytes(const Engine *e) {
    if (e->streaming) return (size_t)(e->stream.plan.spine_bytes + e->stream.plan.globals);
    const TensorInfo **v;
    int n = i8spine_tensors(&e->cat, &v);
    size_t sum = 0;
    for (int i = 0; i < n; i++) sum += e->spine_int8 ? (size_t)i8spine_file_bytes(v[i]) : (size_t)v[i]->nbytes;
    free(v);
    return sum;
}

/* K3_DEV. Opened before the store, whose memory plan depends on what the device will hold. */
static int open_device(Engine *e) {
    DeviceKind kind;
    if (device_resolve(e->opt.device, &kind)) return -1;
    if (kind == DEV_CPU || device_current()) return 0; /* an engine opened inside another shares its device */
    if (device_open(kind)) return -1;
    e->device_open = 1;
    return 0;
}

/* Device memory the layer pass needs besides the spine, beyond the States: activations, the
 * runtime's own, slack for what the estimate misses. */
#define DEVICE_SPINE_MARGIN (2ull << 30)

/* What the layer pass's States take on the device: every slot's States filled to the context (their
 * KDA state and MLA cache), and speculation's replay records (one sequence speculates at a time). */
static uint64_t device_state_bytes(const Engine *e) {
    ModelMemory mm = model_memory(&e->cat.cfg, e->opt.mla_cache, e->max_context, MODEL_BATCH_ROWS);
    return mm.state * (uint64_t)(1 + e->opt.extra_states) * (uint64_t)e->slots + (e->opt.spec ? mm.verify : 0);
}

/* Whether the layer pass's device has room for the whole spine and every slot's States (their
 * device copies): it then keeps every layer, and host RAM need not pin any. */
static int spine_fits_device(const Engine *e) {
    const MatDevice *dev = device_current();
    if (!layers_on_device(e)) return 0;
    return (uint64_t)spine_matrix_bytes(e) + device_state_bytes(e) + DEVICE_SPINE_MARGIN <= dev->weight_room;
}

/* The device keeps copies of weights under their residency keys, which the stores renew whenever
 * bytes change (a streamed spine layer read again, an expert slot refilled), so every store layout
 * may run on it; the buffers the stores refill are offered for page-locking. */
static void offer_buffers(Engine *e) {
    MatDevice *dev = device_current();
    if (!e->device_open) return; /* a device shared with an enclosing engine was set up by it */
    dev->spine_bytes = spine_matrix_bytes(e);
    /* the expert cache takes what the spine leaves: the States' copies must still fit after it */
    if (e->opt.device_pass == PASS_LAYERS) dev->state_bytes = (size_t)device_state_bytes(e);
    if (!e->streaming) return;
    const ExpertStore *es = &e->stream.experts;
    const SpineStore *sp = &e->stream.spine;
    if (es->arena) dev->host_buffer(dev, es->arena, es->arena_bytes);
    for (int i = 0; sp->bufs && i < 2; i++) dev->host_buffer(dev, spine_stream_buf(sp, i), e->stream.plan.stream_buf);
}

/* The mapping's shards offered for page-locking: experts the device's cache does not hold are read
 * from them at every use; page-locked, they copy at the bus's speed on the device's copy stream
 * while it computes, and the CPU threads read them without page faults. */
static void lock_mapping(Engine *e, MatDevice *dev) {
    for (int i = 0; dev->host_buffer && e->store.base && i < e->store.n; i++)
        dev->host_buffer(dev, (void *)e->store.base[i], e->store.size[i]);
}

/* K3_DEV_PASS=layers: every forward runs every layer on the device when it can (model_use_device),
 * with an expert cache run by the host store's policy. */
static int use_device(Engine *e) {
    MatDevice *dev = device_current();
    if (e->opt.device_pass != PASS_LAYERS || !dev) return 0;
    int holds_all = 0;
    dev->graphs = e->opt.device_graphs;
    dev->tensor_cores = e->opt.device_tensor_cores;
    if (e->opt.device_expert_bytes != UINT64_MAX) {
        dev->expert_bytes = e->opt.device_expert_bytes < SIZE_MAX ? (size_t)e->opt.device_expert_bytes : SIZE_MAX;
        lock_mapping(e, dev); /* (before the cache may copy every expert at start-up) */
    }
    if (model_use_device(e->model, e->opt.host_experts, e->opt.store.policy)) return -1;
    if (e->opt.device_expert_bytes == UINT64_MAX && model_device_slots(e->model, &holds_all) >= 0 && !holds_all)
        lock_mapping(e, dev);
    return 0;
}

static int release(Engine *e);

/* Opens into e, zeroed; on failure releases what it opened. */
static int open_engine(Engine *e, const char *dir, const EngineOptions *o) {
    e->opt = *o;
    e->max_context = o->context ? o->context : default_context(o->mla_cache);
    if (kern_select(o->kernels)) return df_failctx("K3_KERNELS=%s", o->kernels);
    if (catalog_open(&e->cat, dir)) return -1;
    if (apply_top_k(e) || spine_choice(e) || choose_slots(e) || open_device(e) || choose_window(e))
        return release(e), -1;
    e->spine_on_device = spine_fits_device(e);
    if (open_store(e)) return release(e), -1;
    e->pool = pool_create(o->threads);
    e->threads = pool_threads(e->pool);
    if (model_create(&e->model, &e->cat, e->spine, e->experts, e->pool, e->opt.a_log, e->max_context, e->opt.mla_cache,
                     e->window)) {
        release(e);
        return -1;
    }
    if (e->streaming) stream_end_load(&e->stream);
    offer_buffers(e);
    if (use_device(e)) return release(e), -1;
    e->max_context = model_max_context(e->model);
    engine_profile_start(e); /* what loading read (the spine the GPU keeps included) is not the first pass's */
    return 0;
}

static int release(Engine *e) {
    if (e->model) model_release_device(e->model); /* before the device closes */
    if (e->device_open) device_close();
    model_destroy(e->model);
    if (e->pool) pool_destroy(e->pool);
    int rc = trace_close(&e->trace);
    if (e->opt.replay) replay_close(&e->replay);
    if (e->store.base) mapped_close(&e->store);
    i8spine_close(&e->i8);
    if (e->streaming) stream_close(&e->stream);
    installer_close(e->inst);
    if (e->cat.dir) catalog_free(&e->cat);
    memset(e, 0, sizeof *e);
    return rc;
}

Engine *engine_open(const char *dir, const EngineOptions *o) {
    Engine *e = df_calloc(1, sizeof *e);
    if (open_engine(e, dir, o)) return free(e), NULL;
    return e;
}

int engine_close(Engine *e) {
    if (!e) return 0;
    int rc = release(e);
    free(e);
    return rc;
}

void engine_info(const Engine *e, EngineInfo *info) {
    const uint64_t i8 = e->streaming ? e->stream.plan.spine_bytes + e->stream.plan.globals : e->i8.bytes;
    *info = (EngineInfo){
        .dir = e->cat.dir,
        .vocab = e->cat.cfg.vocab,
        .eos_id = e->cat.cfg.eos_id,
        .max_context = e->max_context,
        .slots = e->slots,
        .slots_how = e->slots_how,
        .streaming = e->streaming,
        .mla_cache = e->opt.mla_cache,
        .a_log = e->opt.a_log,
        .top_k = e->cat.cfg.top_k,
        .top_k_full = e->top_k_full,
        .spine_int8 = e->spine_int8,
        .int8_spine_bytes = e->spine_int8 ? i8 : 0,
    };
}

Model *engine_model(const Engine *e) { return e->model; }

EngineReads engine_reads(const Engine *e) {
    if (!e->streaming) return (EngineReads){0};
    StreamCounters c = stream_counters((StreamStore *)&e->stream); /* (counters are read under the stores' locks) */
    return (EngineReads){c.spine_bytes, c.expert_bytes, c.experts.hits, c.experts.misses};
}

Tokenizer *engine_tokenizer(const Engine *e) { return tok_load_checked(e->cat.dir, e->cat.cfg.vocab); }

int engine_encode_text(const Engine *e, const Tokenizer *tok, const char *text, size_t len, int **ids) {
    TokIds out = {0};
    if (tok_encode(tok, text, len, 0, &out)) return tokids_free(&out), -1;
    if (out.n == 0) return tokids_free(&out), df_fail("the text encodes to no tokens");
    if (out.n > (size_t)e->max_context) {
        size_t n = out.n; /* tokids_free empties out */
        tokids_free(&out);
        return df_fail("the text is %zu tokens, more than the context limit %d (K3_CONTEXT)", n, e->max_context);
    }
    *ids = df_malloc(sizeof **ids * out.n);
    for (size_t i = 0; i < out.n; i++) (*ids)[i] = out.v[i];
    int n = (int)out.n;
    tokids_free(&out);
    return n;
}

/* The size of the chunk that starts at `at` of n tokens: the remainder first, then full chunks. */
static int chunk_at(size_t at, size_t n, int chunk) {
    size_t rest = n - at, first = rest % (size_t)chunk;
    return first ? (int)first : chunk;
}

/* A chunk in progress, for FeedOptions.progress. */
typedef struct {
    const FeedOptions *o;
    size_t at;
    int T;
} ChunkProgress;

/* model_watch_layers' function: the progress, then whether to stop the chunk. */
static int layer_done(void *ctx, int layer, int n_layers) {
    const ChunkProgress *p = ctx;
    if (p->o->progress) p->o->progress(p->o->ctx, p->at + (size_t)p->T * (size_t)(layer + 1) / (size_t)n_layers);
    return p->o->cancel && p->o->cancel(p->o->cancel_ctx);
}

int engine_feed(Engine *e, State *st, const int32_t *tokens, size_t n, const FeedOptions *o) {
    const int window = model_max_rows(e->model), chunk = o->chunk ? o->chunk : window;
    if (chunk < 1 || chunk > window) return df_fail("chunk size %d outside 1..%d (the prefill window)", chunk, window);
    ChunkProgress p = {o, 0, 0};
    for (size_t at = 0; at < n;) {
        if (o->cancel && o->cancel(o->cancel_ctx)) return 1;
        int T = chunk_at(at, n, chunk);
        p.at = at, p.T = T;
        if (o->progress || o->cancel) model_watch_layers(e->model, layer_done, &p);
        int rc = model_forward(e->model, st, tokens + at, T, o->rows, o->all_rows);
        model_watch_layers(e->model, NULL, NULL);
        if (rc == MODEL_STOPPED) return 1; /* st as before this chunk */
        if (rc) return -1;
        if (o->chunk_done && o->chunk_done(o->ctx, at, T, o->rows)) return -1;
        at += (size_t)T;
    }
    return 0;
}

#include "store/stream.h"

#include <stdlib.h>
#include <string.h>

#include "format/schema.h"
#include "store/budget.h"
#include "util/err.h"
#include "util/platform.h"

/* What the process needs besides weights: what the caller computes with (the model, its States,
 * the sessions: counted by their owners), the catalog, fp32 copies of the small vectors (and their
 * raw bytes while loading), and the runtime. */
static uint64_t fixed_bytes(const Catalog *cat, uint64_t small_bytes, const StreamNeeds *needs) {
    return needs->compute_bytes + (uint64_t)cat->n_tensors * 160 + 3 * small_bytes + (96ull << 20);
}

/* The checkpoint's small vectors (norms, biases, conv taps...), from the schema. */
static uint64_t small_vector_bytes(const K3Config *c) {
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    uint64_t sum = 0;
    for (int l = -1; l < c->n_layers; l++) {
        int n = l < 0 ? schema_globals(c, e) : schema_layer(c, l, e);
        for (int i = 0; i < n; i++)
            if (e[i].role == ROLE_SMALL) sum += schema_nbytes(&e[i]);
    }
    return sum;
}

int stream_wanted(const Catalog *cat, const StreamNeeds *needs, const StoreOptions *o, int *stream) {
    if (o->kind == STORE_STREAM) return *stream = 1, 0;
    if (o->kind == STORE_MAPPED && !o->ram_bytes) return *stream = 0, 0; /* forced, the budget automatic */
    uint64_t total = 0, budget;
    char how[160];
    for (int i = 0; i < cat->n_shards; i++) total += cat->shards[i].size;
    if (budget_detect(o->ram_bytes, &budget, how, sizeof how)) return -1;
    /* mapped, every shard page the model touches stays resident beside the same fixed needs */
    uint64_t fixed = fixed_bytes(cat, small_vector_bytes(&cat->cfg), needs);
    *stream = total + fixed > budget;
    if (o->kind == STORE_MAPPED && *stream) /* a budget given and a store that cannot keep to it */
        return df_fail("--store mapped cannot keep to the memory budget of %.3g GB (--ram-gb): the mapped model is %.3g GB "
                       "and decoding needs %.3g GB beside it; use --store stream (or auto), or a larger --ram-gb",
                       budget / 1e9, total / 1e9, fixed / 1e9);
    return 0;
}

static uint64_t pinned_sum(const SpineStore *sp, int n) {
    uint64_t s = 0;
    for (int l = 0; l < n; l++) s += spine_layer_bytes(sp, l);
    return s;
}

/* Spine cost of pinning n layers: the pinned layers plus two stream buffers if any remain. */
static uint64_t spine_cost(const SpineStore *sp, int n) {
    return pinned_sum(sp, n) + 2 * spine_stream_buf_bytes(sp, n);
}

static int make_plan(StreamPlan *p, const Catalog *cat, const SpineStore *sp, const StreamNeeds *needs,
                     const StoreOptions *o) {
    const K3Config *c = &cat->cfg;
    memset(p, 0, sizeof *p);
    if (o->pin_layers > c->n_layers)
        return df_fail("K3_PIN_LAYERS: %d is more than the model's %d layers", o->pin_layers, c->n_layers);
    if (budget_detect(o->ram_bytes, &p->budget, p->how, sizeof p->how)) return -1;
    p->n_layers = c->n_layers;
    p->fixed = fixed_bytes(cat, spine_small_bytes(sp), needs);
    p->globals = spine_globals_bytes(sp);
    p->spine_bytes = pinned_sum(sp, c->n_layers);
    p->slot_bytes = experts_slot_bytes(cat);
    int moe_layers = c->n_layers - c->first_dense;
    int min_slots = moe_layers > 0 ? 2 * c->top_k : 0;
    uint64_t base = p->fixed + p->globals + (uint64_t)min_slots * p->slot_bytes;
    p->spine_on_device = needs->spine_on_device;
    if (o->pin_layers >= 0) p->pinned = o->pin_layers;
    else if (needs->spine_on_device) p->pinned = 0;
    else
        for (p->pinned = c->n_layers; p->pinned > 0 && base + spine_cost(sp, p->pinned) > p->budget; p->pinned--) {}
    uint64_t need = base + spine_cost(sp, p->pinned);
    if (need > p->budget)
        return df_fail("memory budget %.1f MB (%s) is below what this model needs with %d pinned layers: %.1f MB "
                       "(fixed %.1f, globals %.1f, spine %.1f, %d expert slots %.1f); raise K3_RAM_GB",
                       p->budget / 1e6, p->how, p->pinned, need / 1e6, p->fixed / 1e6, p->globals / 1e6,
                       spine_cost(sp, p->pinned) / 1e6, min_slots, min_slots * (double)p->slot_bytes / 1e6);
    p->pinned_bytes = pinned_sum(sp, p->pinned);
    p->stream_buf = spine_stream_buf_bytes(sp, p->pinned);
    uint64_t room = (p->budget - need) / p->slot_bytes + (uint64_t)min_slots;
    uint64_t all = (uint64_t)moe_layers * (uint64_t)c->n_experts;
    p->slots = (int)(room < all ? room : all);
    return 0;
}

int stream_open(StreamStore *s, const Catalog *cat, const StreamNeeds *needs, const StoreOptions *o) {
    memset(s, 0, sizeof *s);
    s->opt = *o;
    if (spine_layout(&s->spine, cat, needs->int8_spine)) return -1;
    if (make_plan(&s->plan, cat, &s->spine, needs, o) || shards_open(&s->shards, cat, o->direct)) {
        spine_close(&s->spine);
        return -1;
    }
    s->spine.prefetch = o->prefetch;
    if (iopool_create(&s->io, o->io, o->io_threads) || spine_start(&s->spine, &s->shards, s->io, s->plan.pinned, o->direct) ||
        (s->plan.slots > 0 &&
         experts_open(&s->experts, cat, &s->shards, s->io, s->plan.slots, o->policy, o->prefetch, o->lookahead,
                      o->populate))) {
        stream_close(s);
        return -1;
    }
    return 0;
}

void stream_end_load(StreamStore *s) { spine_end_load(&s->spine); }

void stream_close(StreamStore *s) {
    iopool_destroy(s->io); /* first: no read may still target a buffer */
    s->io = NULL;
    experts_close(&s->experts);
    spine_close(&s->spine);
    if (s->shards.fd) shards_close(&s->shards);
    memset(s, 0, sizeof *s);
}

void stream_print_plan(const StreamStore *s, FILE *f) {
    const StreamPlan *p = &s->plan;
    fprintf(f, "deltafin: streaming: budget %.2f GB (%s) | fixed %.1f MB | spine %.2f GB: %d/%d layers pinned (%.2f GB)",
            p->budget / 1e9, p->how, p->fixed / 1e6, (p->spine_bytes + p->globals) / 1e9, p->pinned, p->n_layers,
            (p->pinned_bytes + p->globals) / 1e9);
    if (p->pinned < p->n_layers)
        fprintf(f, ", %d streamed through 2 x %.1f MB%s", p->n_layers - p->pinned, p->stream_buf / 1e6,
                p->spine_on_device ? " (once, at start-up: the GPU keeps them)" : "");
    fprintf(f, " | expert cache %.2f GB = %d x %.2f MB (%s%s%s) | reads %s, %s x%d\n",
            (double)p->slots * p->slot_bytes / 1e9, p->slots, p->slot_bytes / 1e6, cache_policy_name(s->opt.policy),
            s->opt.prefetch ? ", prefetch" : ", no prefetch", s->opt.lookahead ? ", router lookahead" : "",
            s->shards.direct    ? plat_uncached_name()
            : s->shards.refused ? "buffered + DONTNEED (the file system refuses O_DIRECT)"
                                : "buffered + DONTNEED (K3_DIRECT=0)",
            iopool_backend_name(iopool_backend(s->io)), iopool_depth(s->io));
}

StreamCounters stream_counters(StreamStore *s) {
    StreamCounters c = {0};
    pthread_mutex_lock(&s->spine.mu);
    c.spine_bytes = s->spine.bytes_read;
    pthread_mutex_unlock(&s->spine.mu);
    if (s->experts.slots) c.experts = experts_counters(&s->experts);
    c.expert_bytes = c.experts.bytes_read;
    return c;
}

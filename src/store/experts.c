#include "store/experts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store/mats.h"
#include "util/err.h"
#include "util/platform.h"

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_READY, SLOT_FAILED };
/* Why a slot was filled, for the hit/miss counts: a read for a routed expert already counted
 * as a miss, a guess (prefetch), or an expert used since it arrived. */
enum { FOR_DEMAND, FOR_GUESS, FOR_DONE };

struct ExpertSlot {
    IoJob job;               /* first member: the I/O pool runs it */
    ExpertStore *es;
    uint8_t *buf;
    uint64_t gen;            /* fills of this slot so far: its Mats' residency key generation */
    int layer, expert;
    int state, pinned, origin;
    char err[384];
};

uint64_t experts_slot_bytes(const Catalog *cat) { return shard_read_cap(SHARD_ALIGN - 1, cat->expert_bytes); }

/* The matrices of the expert a ready slot holds, keyed by the slot and its fill. */
static ExpertMats slot_mats(const ExpertSlot *s) {
    const ExpertSpan *sp = catalog_expert(s->es->cat, s->layer, s->expert);
    MatKey key = store_key(s->es->id, (uint64_t)(s - s->es->slots), s->gen);
    return store_expert_mats(s->es->cat, s->buf + sp->offset % SHARD_ALIGN, key);
}

static void set_locked(ExpertStore *es, int i) {
    cidx_lock(&es->ci, i, es->slots[i].pinned || es->slots[i].state == SLOT_LOADING);
}

static void describe_slot(const IoJob *job, char *what, size_t n) {
    const ExpertSlot *s = (const ExpertSlot *)job;
    snprintf(what, n, "layer %d expert %d", s->layer, s->expert);
}

/* I/O thread: a slot's read ended. */
static void slot_filled(IoJob *job, int rc) {
    ExpertSlot *s = (ExpertSlot *)job;
    ExpertStore *es = s->es;
    if (rc) snprintf(s->err, sizeof s->err, "%s", df_errmsg());
    pthread_mutex_lock(&es->mu);
    s->state = rc ? SLOT_FAILED : SLOT_READY;
    if (!rc) es->c.bytes_read += job->alen;
    set_locked(es, (int)(s - es->slots));
    pthread_cond_broadcast(&es->done);
    pthread_mutex_unlock(&es->mu);
}

/* Makes slot i the home of (layer, expert) and describes its read; the caller submits the job. */
static IoJob *start_read(ExpertStore *es, int i, int layer, int expert, int urgent) {
    ExpertSlot *s = &es->slots[i];
    const ExpertSpan *sp = catalog_expert(es->cat, layer, expert);
    s->gen++; /* other bytes from now on: a device's copy of the old ones is stale */
    cidx_assign(&es->ci, i, layer * es->cat->cfg.n_experts + expert);
    s->layer = layer, s->expert = expert;
    s->state = SLOT_LOADING;
    s->origin = urgent ? FOR_DEMAND : FOR_GUESS;
    if (urgent) es->c.misses++;
    else es->c.prefetches++;
    cidx_touch(&es->ci, i); /* a fresh guess counts as recent, not as a use */
    set_locked(es, i);
    IoJob *j = &s->job;
    j->files = es->shards, j->file = sp->shard;
    j->aoff = sp->offset & ~(uint64_t)(SHARD_ALIGN - 1);
    j->alen = shard_read_cap(sp->offset, es->cat->expert_bytes);
    j->need = sp->offset + es->cat->expert_bytes - j->aoff;
    return j;
}

static void pin(ExpertStore *es, int i) {
    es->slots[i].pinned = 1;
    es->pinned[es->n_pinned++] = i;
    set_locked(es, i);
}

static void unpin_all(ExpertStore *es) {
    for (int j = 0; j < es->n_pinned; j++) {
        es->slots[es->pinned[j]].pinned = 0;
        set_locked(es, es->pinned[j]);
    }
    es->n_pinned = 0;
}

/* A needed expert that is cached or on its way; -1 if it is not. */
static int claim_cached(ExpertStore *es, int layer, int expert) {
    int key = layer * es->cat->cfg.n_experts + expert, i = cidx_lookup(&es->ci, key);
    if (i < 0) return -1;
    ExpertSlot *s = &es->slots[i];
    if (s->state == SLOT_FAILED) return -1; /* retried as a demand read */
    if (s->origin != FOR_DEMAND) es->c.hits++;
    if (s->origin == FOR_GUESS) es->c.prefetch_hits++;
    s->origin = FOR_DONE;
    if (s->state == SLOT_LOADING) iopool_promote(es->io, &s->job);
    cidx_use(&es->ci, key, i);
    pin(es, i);
    return i;
}

/* A needed expert that is not cached: take a slot (waiting for an in-flight read to free one if
 * every other slot is busy) and read it now. */
static void claim_missing(ExpertStore *es, int layer, int expert) {
    int key = layer * es->cat->cfg.n_experts + expert, i = cidx_lookup(&es->ci, key);
    if (i < 0) {
        while ((i = cidx_victim(&es->ci, layer)) < 0) pthread_cond_wait(&es->done, &es->mu);
    }
    iopool_submit(es->io, start_read(es, i, layer, expert, 1), IO_URGENT);
    es->slots[i].origin = FOR_DONE;
    cidx_use(&es->ci, key, i);
    pin(es, i);
}

static int wait_pinned(ExpertStore *es, ExpertMats *mats) {
    for (int j = 0; j < es->n_pinned; j++) {
        ExpertSlot *s = &es->slots[es->pinned[j]];
        while (s->state == SLOT_LOADING) pthread_cond_wait(&es->done, &es->mu);
        if (s->state == SLOT_FAILED) {
            df_fail("%s", s->err);
            s->state = SLOT_EMPTY;
            cidx_assign(&es->ci, es->pinned[j], -1);
            return -1;
        }
        mats[j] = slot_mats(s);
    }
    return 0;
}

static int next_moe_layer(const K3Config *c, int layer) { return layer + 1 < c->n_layers ? layer + 1 : c->first_dense; }

/* Background reads of what the next layer chose last time, into slots nobody is using (the
 * current layer's experts are held by the caller). */
static void prefetch_next(ExpertStore *es, int layer) {
    const K3Config *c = &es->cat->cfg;
    int next = next_moe_layer(c, layer), n = 0;
    const int *want = es->predict + (size_t)next * c->top_k;
    IoJob *jobs[MODEL_MAX_ROUTED];
    for (int j = 0; j < c->top_k && want[j] >= 0; j++) {
        if (cidx_lookup(&es->ci, next * c->n_experts + want[j]) >= 0) continue;
        int i = cidx_victim(&es->ci, layer);
        if (i < 0) break;
        jobs[n++] = start_read(es, i, next, want[j], 0);
    }
    iopool_submit_many(es->io, jobs, n, IO_GUESS);
}

/* The distinct non-negative ids among sel[0..n), ascending (the order the model acquires them). */
static int distinct(const int *sel, int n_sel, int *ids) {
    int n = 0;
    for (int i = 0; i < n_sel; i++) {
        int e = sel[i], at = n;
        if (e < 0) continue;
        while (at > 0 && ids[at - 1] > e) at--;
        if (at > 0 && ids[at - 1] == e) continue;
        memmove(ids + at + 1, ids + at, sizeof *ids * (size_t)(n - at));
        ids[at] = e, n++;
    }
    return n;
}

/* Locks the cached ones among experts ids[0..n) of layer so that reads started now cannot evict
 * them; returns how many it locked (held[], for set_locked afterwards). */
static int hold_cached(ExpertStore *es, int layer, const int *ids, int n, int *held) {
    int n_held = 0;
    for (int j = 0; j < n; j++) {
        int i = cidx_lookup(&es->ci, layer * es->cat->cfg.n_experts + ids[j]);
        if (i < 0 || es->slots[i].state == SLOT_FAILED) continue;
        if (es->slots[i].state == SLOT_LOADING) iopool_promote(es->io, &es->slots[i].job);
        if (!es->ci.locked[i]) cidx_lock(&es->ci, i, 1), held[n_held++] = i;
    }
    return n_held;
}

/* The model announces a layer's selections before acquiring them: start reading every one that
 * is missing now (urgent), so the model can compute each expert as it arrives while the others
 * are still on their way; then guess at the next layer. Up to half the cache is used this way. */
static void experts_route(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertStore *es = (ExpertStore *)src;
    const K3Config *c = &es->cat->cfg;
    int ids[MODEL_MAX_ROUTED], n = distinct(sel, T * k, ids);
    pthread_mutex_lock(&es->mu);
    if (layer <= es->routed_layer) cidx_next_pass(&es->ci); /* a new forward began */
    int *p = es->predict + (size_t)layer * c->top_k;
    for (int j = 0; j < c->top_k; j++) p[j] = j < n ? ids[j] : -1;
    memcpy(es->routed, ids, sizeof *ids * (size_t)n);
    es->n_routed = n, es->routed_layer = layer;
    /* hold what is cached while the missing ones (and the guesses) look for slots */
    int held[MODEL_MAX_ROUTED], reads = es->ci.n_slots / 2, n_jobs = 0;
    int n_held = hold_cached(es, layer, ids, n, held);
    IoJob *jobs[MODEL_MAX_ROUTED];
    for (int j = 0; j < n && n_jobs < reads; j++) {
        int i = cidx_lookup(&es->ci, layer * c->n_experts + ids[j]);
        if (i >= 0 && es->slots[i].state != SLOT_FAILED) continue;
        if (i < 0 && (i = cidx_victim(&es->ci, layer)) < 0) break;
        jobs[n_jobs++] = start_read(es, i, layer, ids[j], 1);
    }
    iopool_submit_many(es->io, jobs, n_jobs, IO_URGENT);
    if (es->prefetch) prefetch_next(es, layer);
    for (int j = 0; j < n_held; j++) set_locked(es, held[j]);
    pthread_mutex_unlock(&es->mu);
}

/* Router lookahead's guess at a later layer: background reads of the guessed experts that are
 * not cached, into slots that the layer being computed does not need (its routed experts are
 * held meanwhile), at most a quarter of the cache per guess. */
static void experts_predict(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertStore *es = (ExpertStore *)src;
    const K3Config *c = &es->cat->cfg;
    int ids[MODEL_MAX_ROUTED], n = distinct(sel, T * k, ids);
    pthread_mutex_lock(&es->mu);
    int held[MODEL_MAX_ROUTED], reads = es->ci.n_slots / 4, n_jobs = 0;
    int n_held = hold_cached(es, es->routed_layer, es->routed, es->n_routed, held);
    IoJob *jobs[MODEL_MAX_ROUTED];
    for (int j = 0; j < n && n_jobs < reads; j++) {
        if (cidx_lookup(&es->ci, layer * c->n_experts + ids[j]) >= 0) continue;
        int i = cidx_victim(&es->ci, es->routed_layer);
        if (i < 0) break;
        jobs[n_jobs++] = start_read(es, i, layer, ids[j], 0);
    }
    iopool_submit_many(es->io, jobs, n_jobs, IO_GUESS);
    for (int j = 0; j < n_held; j++) set_locked(es, held[j]);
    pthread_mutex_unlock(&es->mu);
}

static int in_memory(ExpertStore *es, int layer, int expert) {
    int i = cidx_lookup(&es->ci, layer * es->cat->cfg.n_experts + expert);
    return i >= 0 && es->slots[i].state == SLOT_READY;
}

/* The experts among ids[0..n) whose bytes are in a slot now go first, in their order, then the
 * rest in theirs; nothing moves while the first one is ready. */
static int experts_ready_first(ExpertSource *src, int layer, int *ids, int n) {
    ExpertStore *es = (ExpertStore *)src;
    int rest[MODEL_MAX_ROUTED], n_ready = 1, n_rest = 0;
    pthread_mutex_lock(&es->mu);
    if (!in_memory(es, layer, ids[0])) {
        n_ready = 0;
        for (int j = 0; j < n; j++) {
            if (in_memory(es, layer, ids[j])) ids[n_ready++] = ids[j];
            else rest[n_rest++] = ids[j];
        }
        memcpy(ids + n_ready, rest, sizeof *rest * (size_t)n_rest);
    }
    pthread_mutex_unlock(&es->mu);
    return n_ready > 0;
}

static int experts_acquire(ExpertSource *src, int layer, const int *ids, int n, ExpertMats *out) {
    ExpertStore *es = (ExpertStore *)src;
    if (layer < es->cat->cfg.first_dense || layer >= es->cat->cfg.n_layers) return df_fail("layer %d has no routed experts", layer);
    if (n > es->ci.n_slots) return df_fail("expert store: %d experts asked at once, the cache holds %d", n, es->ci.n_slots);
    pthread_mutex_lock(&es->mu);
    unpin_all(es);
    int order[MODEL_MAX_ROUTED], n_miss = 0;
    /* hits first, so that reading a miss never evicts an expert this same call needs */
    for (int j = 0; j < n; j++)
        if (claim_cached(es, layer, ids[j]) < 0) order[n_miss++] = j;
    for (int j = 0; j < n_miss; j++) claim_missing(es, layer, ids[order[j]]);
    /* pinned[] is in claim order; map back to the caller's order */
    ExpertMats got[MODEL_MAX_ROUTED];
    int rc = wait_pinned(es, got);
    if (!rc) {
        int h = 0, m = n - n_miss;
        for (int j = 0, o = 0; j < n; j++) {
            if (o < n_miss && order[o] == j) out[j] = got[m + o++];
            else out[j] = got[h++];
        }
    }
    pthread_mutex_unlock(&es->mu);
    return rc;
}

/* A fresh cache arena costs the kernel a page fault (and a zeroed page) for every 4 KiB that a
 * first read lands on, inside the read: about 0.45 s per GB on a VM, paid by the first tokens.
 * MADV_POPULATE_WRITE prepares the pages without touching their content, so this thread can run
 * ahead of the reads, in the order the cache hands out free slots (slot 0 first). Where the
 * kernel lacks it (before Linux 5.14) the reads fault as before. Once every page is there, an
 * io_uring pool registers the arena, so later reads skip pinning its pages one read at a time
 * (where the memory-lock limit refuses that, reads stay as they were). */
static void *populate_arena(void *arg) {
    ExpertStore *es = arg;
    const size_t step = (size_t)32 << 20;
    size_t off = 0;
    for (; off < es->arena_bytes && !atomic_load(&es->populate_stop); off += step) {
        size_t n = es->arena_bytes - off < step ? es->arena_bytes - off : step;
        if (plat_prefault(es->arena + off, n) != 0) break;
    }
    if (off >= es->arena_bytes && !atomic_load(&es->populate_stop) && iopool_backend(es->io) == IO_URING)
        iopool_register_buffers(es->io, es->arena, es->arena_bytes); /* refused: nothing changes */
    return NULL;
}

int experts_open(ExpertStore *es, const Catalog *cat, const Shards *shards, IoPool *io, int n_slots,
                 CachePolicy policy, int prefetch, int lookahead, int populate) {
    const K3Config *c = &cat->cfg;
    memset(es, 0, sizeof *es);
    if (n_slots < 1) return df_fail("expert store: no room for a single expert");
    es->src.acquire = experts_acquire;
    es->src.max_batch = 1; /* one expert per acquire: compute each as soon as it has arrived */
    es->src.route = experts_route;
    es->src.predict = lookahead ? experts_predict : NULL;
    es->src.ready_first = experts_ready_first;
    es->routed_layer = -1;
    es->cat = cat, es->shards = shards, es->io = io, es->prefetch = prefetch;
    es->id = mat_store_id();
    pthread_mutex_init(&es->mu, NULL);
    pthread_cond_init(&es->done, NULL);
    cidx_init(&es->ci, policy, n_slots, c->n_layers, c->n_experts);
    es->slot_bytes = experts_slot_bytes(cat);
    es->slots = df_calloc((size_t)n_slots, sizeof *es->slots);
    /* one arena of ordinary pages, touched only as slots fill (no start-up cost). Huge pages
     * (MADV_HUGEPAGE) were measured 5x slower to fault in on a VM, so they are not requested. */
    es->arena_bytes = (size_t)n_slots * es->slot_bytes;
    es->arena = mmap(NULL, es->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (es->arena == MAP_FAILED) {
        es->arena = NULL;
        experts_close(es);
        return df_fail("expert cache: cannot reserve %.2f GB: %s", es->arena_bytes / 1e9, strerror(errno));
    }
    for (int i = 0; i < n_slots; i++) {
        es->slots[i].es = es;
        es->slots[i].job.done = slot_filled, es->slots[i].job.describe = describe_slot;
        es->slots[i].buf = es->slots[i].job.buf = es->arena + (size_t)i * es->slot_bytes;
    }
    es->pinned = df_malloc(sizeof *es->pinned * (size_t)n_slots);
    es->predict = df_malloc(sizeof *es->predict * (size_t)c->n_layers * (size_t)c->top_k);
    memset(es->predict, 0xff, sizeof *es->predict * (size_t)c->n_layers * (size_t)c->top_k);
    atomic_init(&es->populate_stop, 0);
    es->populating = populate && pthread_create(&es->populator, NULL, populate_arena, es) == 0;
    return 0;
}

void experts_close(ExpertStore *es) {
    if (!es->slots) return;
    if (es->populating) atomic_store(&es->populate_stop, 1), pthread_join(es->populator, NULL);
    if (es->arena) munmap(es->arena, es->arena_bytes);
    free(es->slots), free(es->pinned), free(es->predict);
    cidx_free(&es->ci);
    pthread_mutex_destroy(&es->mu);
    pthread_cond_destroy(&es->done);
    memset(es, 0, sizeof *es);
}

ExpertCounters experts_counters(ExpertStore *es) {
    pthread_mutex_lock(&es->mu);
    ExpertCounters c = es->c;
    pthread_mutex_unlock(&es->mu);
    return c;
}

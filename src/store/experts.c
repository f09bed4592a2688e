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
    int pending;             /* routed by the pass in progress and not acquired yet: never evicted */
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
    const ExpertSlot *s = &es->slots[i];
    cidx_lock(&es->ci, i, s->pinned || s->pending || s->state == SLOT_LOADING);
}

static void set_pending(ExpertStore *es, int i, int on) {
    es->slots[i].pending = on;
    set_locked(es, i);
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
    s->pending = 0;
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
    IoJob *jobs[K3_MAX_TOP_K];
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

/* Starts urgent reads of the routed experts not cached yet, from the cursor on in their order, into
 * slots that no routed expert waits in, while no more than `ahead` routed experts are on their way
 * or waiting to be acquired. A read expert stays pending (locked) until acquired. */
static void read_ahead(ExpertStore *es, int layer, int ahead) {
    const K3Config *c = &es->cat->cfg;
    int n_jobs = 0, waiting = 0;
    for (int i = 0; i < es->ci.n_slots; i++) waiting += es->slots[i].pending;
    for (; es->next_read < es->n_routed && waiting < ahead; es->next_read++) {
        const int e = es->routed[es->next_read], key = layer * c->n_experts + e;
        if (es->acquired[e]) continue; /* read on demand before its turn, and used */
        int i = cidx_lookup(&es->ci, key);
        if (i >= 0 && es->slots[i].state != SLOT_FAILED) continue; /* cached: made pending at route */
        if (i < 0 && (i = cidx_victim(&es->ci, layer)) < 0) break;
        es->jobs[n_jobs++] = start_read(es, i, layer, e, 1);
        set_pending(es, i, 1);
        waiting++;
    }
    iopool_submit_many(es->io, es->jobs, n_jobs, IO_URGENT);
}

/* The model announces a layer's selections before acquiring them: every routed expert that is
 * cached is kept (pending) until acquired, and the missing ones are read in order, as many ahead as
 * half the cache (a pass routes to more experts than that: the rest are read as the acquires free
 * slots), so the model computes each expert as it arrives while the others are on their way, and
 * reads each routed expert once per pass however many rows chose it. A decode step's pass (no more
 * distinct experts than top-k) then guesses at the next layer. */
static void experts_route(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertStore *es = (ExpertStore *)src;
    const K3Config *c = &es->cat->cfg;
    int n = distinct(sel, T * k, es->routed);
    pthread_mutex_lock(&es->mu);
    if (layer <= es->routed_layer) cidx_next_pass(&es->ci); /* a new forward began */
    for (int i = 0; i < es->ci.n_slots; i++)
        if (es->slots[i].pending) set_pending(es, i, 0); /* (a pass that ended before acquiring them) */
    int *p = es->predict + (size_t)layer * c->top_k;
    for (int j = 0; j < c->top_k; j++) p[j] = j < n ? es->routed[j] : -1;
    es->n_routed = n, es->routed_layer = layer, es->next_read = 0;
    memset(es->acquired, 0, (size_t)c->n_experts);
    for (int j = 0; j < n; j++) {
        int i = cidx_lookup(&es->ci, layer * c->n_experts + es->routed[j]);
        if (i < 0 || es->slots[i].state == SLOT_FAILED) continue;
        if (es->slots[i].state == SLOT_LOADING) iopool_promote(es->io, &es->slots[i].job);
        set_pending(es, i, 1);
    }
    read_ahead(es, layer, es->ci.n_slots / 2 > 1 ? es->ci.n_slots / 2 : 1);
    if (es->prefetch && n <= c->top_k) prefetch_next(es, layer);
    pthread_mutex_unlock(&es->mu);
}

/* Router lookahead's guess at a later layer: background reads of the guessed experts that are
 * not cached, into slots that the layer being computed does not need (its routed experts are
 * held meanwhile), at most a quarter of the cache per guess. */
static void experts_predict(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertStore *es = (ExpertStore *)src;
    const K3Config *c = &es->cat->cfg;
    pthread_mutex_lock(&es->mu);
    int n = distinct(sel, T * k, es->ids), reads = es->ci.n_slots / 4, n_jobs = 0;
    for (int j = 0; j < n && n_jobs < reads; j++) { /* (the routed layer's experts are pending: never victims) */
        if (cidx_lookup(&es->ci, layer * c->n_experts + es->ids[j]) >= 0) continue;
        int i = cidx_victim(&es->ci, es->routed_layer);
        if (i < 0) break;
        es->jobs[n_jobs++] = start_read(es, i, layer, es->ids[j], 0);
    }
    iopool_submit_many(es->io, es->jobs, n_jobs, IO_GUESS);
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
    int *rest = es->ids, n_ready = 1, n_rest = 0;
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
    int *order = es->ids, n_miss = 0;
    /* hits first, so that reading a miss never evicts an expert this same call needs */
    for (int j = 0; j < n; j++)
        if (claim_cached(es, layer, ids[j]) < 0) order[n_miss++] = j;
    for (int j = 0; j < n_miss; j++) claim_missing(es, layer, ids[order[j]]);
    for (int j = 0; layer == es->routed_layer && j < n; j++) es->acquired[ids[j]] = 1;
    if (layer == es->routed_layer) read_ahead(es, layer, es->ci.n_slots / 2 > 1 ? es->ci.n_slots / 2 : 1);
    /* pinned[] is in claim order; map back to the caller's order */
    ExpertMats *got = es->got;
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
    es->got = df_malloc(sizeof *es->got * (size_t)n_slots);
    es->routed = df_malloc(sizeof *es->routed * (size_t)c->n_experts);
    es->ids = df_malloc(sizeof *es->ids * (size_t)c->n_experts);
    es->jobs = df_malloc(sizeof *es->jobs * (size_t)c->n_experts);
    es->acquired = df_calloc((size_t)c->n_experts, 1);
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
    free(es->got), free(es->routed), free(es->ids), free(es->jobs), free(es->acquired);
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

/* matcher.c - allowed-token masks and state advance (see matcher.h).
 *
 * The state is a set of threads (match_step.h) in the first `base` frames of the arena; walks
 * use the arena above it and give it back. A mask is the union, over threads, of:
 *   - the tokens that stay inside the thread's innermost frame, from the cache entry of that
 *     frame's state (built by one walk of the whole trie with the frame alone, its context
 *     replaced by FR_DETACHED);
 *   - the tokens of the entry's "dependent" subtrees, where the frame ends and the rest of the
 *     token meets the frames below it, walked with the whole thread;
 *   - the chat markers, each tried with the whole thread.
 * The budget check needs the fewest tokens that finish the match after each token: for cached
 * tokens that is the thread's count plus a change the entry records (its least and greatest),
 * so the whole set passes, or none does, or (near the end of the budget) the trie is walked
 * with the whole thread once. A string's entry ignores maxLength and records how many characters
 * each token adds, so one entry serves the whole string: the mask keeps the tokens that fit. */
#include "text/matcher.h"

#include <stdlib.h>
#include <string.h>

#include "text/match_step.h"
#include "util/err.h"

#define CACHE_ENTRIES 64

typedef struct {
    FrameKey key;
    uint64_t *bits;  /* tokens that stay inside the frame */
    uint16_t *chars; /* string frames: characters each of those tokens adds (maxLength ignored) */
    uint32_t max_chars;
    uint32_t *deps;  /* trie nodes where the frame may end (preorder) */
    uint32_t n_deps, cap_deps;
    int64_t dmin, dmax; /* change of the tokens needed, over the tokens in bits */
    uint32_t n_inside;
    uint64_t used;
    int valid;
} CacheEntry;

struct Matcher {
    const Grammar *g;
    const VocabTrie *t;
    Arena ar;
    uint32_t base;  /* arena frames [0, base) hold the state */
    Threads cur;
    Threads *lvl;   /* [max_len + 1] threads after each prefix length of the walk */
    uint32_t *mark; /* [max_len + 1] arena top after each level */
    uint8_t *bytes; /* [max_len] a token's bytes */
    size_t words;
    CacheEntry cache[CACHE_ENTRIES];
    uint64_t clock;
    MatcherStats stats;
};

typedef struct {
    uint64_t *bits;
    int64_t budget;     /* full walks: < 0 none */
    CacheEntry *entry;  /* cache walks: where inside tokens and dependent nodes go */
    uint32_t rem_top;   /* cache walks: tokens the frame needed before the token */
    uint32_t count0;    /* cache walks of a string: its characters before the token */
    int overflow;
} Walk;

static void set_token(const VocabTrie *t, uint64_t *bits, int32_t id) {
    for (; id >= 0; id = t->same[id]) bits[id >> 6] |= 1ull << (id & 63);
}

static uint32_t least_remaining(const Arena *a, const Threads *s) {
    uint32_t best = GRAMMAR_INF;
    for (int i = 0; i < s->n; i++) {
        uint32_t r = match_remaining(a, s->t[i]);
        if (r < best) best = r;
    }
    return best;
}

static void add_dep(CacheEntry *e, uint32_t node) {
    if (e->n_deps == e->cap_deps) {
        e->cap_deps = e->cap_deps ? e->cap_deps * 2 : 64;
        e->deps = df_realloc(e->deps, e->cap_deps * sizeof *e->deps);
    }
    e->deps[e->n_deps++] = node;
}

/* A token ending at a node the threads S reached. */
static void at_token(Matcher *m, Walk *w, const Threads *s, int32_t id) {
    if (w->entry) {
        int64_t d = (int64_t)least_remaining(&m->ar, s) - w->rem_top;
        CacheEntry *e = w->entry;
        if (!e->n_inside || d < e->dmin) e->dmin = d;
        if (!e->n_inside || d > e->dmax) e->dmax = d;
        e->n_inside++;
        set_token(m->t, e->bits, id);
        if (e->chars) { /* a string frame stays one thread: its own frame */
            uint32_t c = m->ar.fr[s->t[0]].a - w->count0;
            if (c > e->max_chars) e->max_chars = c;
            for (int32_t k = id; k >= 0; k = m->t->same[k]) e->chars[k] = (uint16_t)c;
        }
        return;
    }
    if (w->budget < 0 || (int64_t)least_remaining(&m->ar, s) <= w->budget - 1) set_token(m->t, w->bits, id);
}

/* Steps the threads of the level above trie node i by its byte into the level of i (the arena
 * first given back to where that level began); returns the new level. */
static Threads *step_level(Matcher *m, Walk *w, uint32_t i) {
    uint32_t d = m->t->depth[i];
    m->ar.n = m->mark[d - 1];
    Threads *s = &m->lvl[d];
    const Threads *prev = &m->lvl[d - 1];
    s->n = 0, s->detached_pop = 0, s->overflow = 0;
    for (int k = 0; k < prev->n; k++) match_step(&m->ar, prev->t[k], m->t->byte[i], s);
    w->overflow |= s->overflow;
    return s;
}

/* Depth-first walk of trie nodes [from, to) (a subtree, or the whole trie from node 1); the
 * threads before node `from` are in lvl[depth(from) - 1]. */
static void walk_range(Matcher *m, Walk *w, uint32_t from, uint32_t to) {
    const VocabTrie *t = m->t;
    m->mark[t->depth[from] - 1] = m->ar.n;
    for (uint32_t i = from; i < to;) {
        Threads *s = step_level(m, w, i);
        if (w->entry && s->detached_pop) { /* the frame may end inside this token: walked per thread */
            add_dep(w->entry, i);
            i = t->end[i];
            continue;
        }
        if (s->n == 0) {
            i = t->end[i];
            continue;
        }
        if (t->token[i] >= 0) at_token(m, w, s, t->token[i]);
        m->mark[t->depth[i]] = m->ar.n;
        i++;
    }
}

/* ------------------------------------------------------------------ cache */

static CacheEntry *cache_entry(Matcher *m, uint32_t thread, int *overflow) {
    FrameKey key;
    frame_cache_key(m->g, &m->ar.fr[thread], m->t->max_len, &key);
    CacheEntry *victim = &m->cache[0];
    m->clock++;
    for (int i = 0; i < CACHE_ENTRIES; i++) {
        CacheEntry *e = &m->cache[i];
        if (e->valid && !memcmp(&e->key, &key, sizeof key)) {
            e->used = m->clock;
            return e;
        }
        if (!e->valid || e->used < victim->used) victim = e;
    }
    CacheEntry *e = victim;
    if (!e->bits) e->bits = df_malloc(m->words * sizeof *e->bits);
    memset(e->bits, 0, m->words * sizeof *e->bits);
    e->key = key, e->n_deps = 0, e->n_inside = 0, e->dmin = e->dmax = 0, e->used = m->clock, e->valid = 1;
    e->max_chars = 0;
    /* the frame alone: a copy whose parent is unknown */
    uint32_t top = m->ar.n;
    Frame f = m->ar.fr[thread];
    f.parent = FR_DETACHED;
    int string = frame_is_string(m->g, &f);
    if (string && !e->chars) e->chars = df_malloc((size_t)m->t->n_ids * sizeof *e->chars);
    if (!string) free(e->chars), e->chars = NULL;
    Walk w = {.entry = e, .rem_top = frame_rem(m->g, &f), .count0 = f.a};
    m->lvl[0].n = 0;
    m->lvl[0].t[m->lvl[0].n++] = arena_push(&m->ar, &f);
    m->ar.unbounded_strings = (uint8_t)string;
    m->stats.cache_walks++;
    walk_range(m, &w, 1, m->t->n_nodes);
    m->ar.unbounded_strings = 0;
    m->ar.n = top;
    if (w.overflow) {
        e->valid = 0;
        *overflow = 1;
    }
    return e;
}

/* ------------------------------------------------------------------ masks */

/* Walks the paths to the entry's dependent nodes with the whole thread, and their subtrees. */
static void walk_dependents(Matcher *m, Walk *w, uint32_t thread, const CacheEntry *e) {
    const VocabTrie *t = m->t;
    uint32_t k = 0, i = 1;
    m->lvl[0].n = 1, m->lvl[0].t[0] = thread;
    m->mark[0] = m->ar.n;
    while (i < t->n_nodes && k < e->n_deps) {
        if (e->deps[k] >= t->end[i]) { /* no dependent node below i */
            i = t->end[i];
            continue;
        }
        if (i == e->deps[k]) {
            walk_range(m, w, i, t->end[i]);
            while (k < e->n_deps && e->deps[k] < t->end[i]) k++;
            i = t->end[i];
            continue;
        }
        if (step_level(m, w, i)->n == 0) { /* cannot happen: the cache walk went through here */
            while (k < e->n_deps && e->deps[k] < t->end[i]) k++;
            i = t->end[i];
            continue;
        }
        m->mark[t->depth[i]] = m->ar.n;
        i++;
    }
}

static int marker_allowed(Matcher *m, uint32_t thread, int marker, int64_t budget) {
    uint32_t top = m->ar.n;
    Threads s = {0};
    match_step(&m->ar, thread, GU_MARKER(marker), &s);
    int ok = s.n > 0 && (budget < 0 || (int64_t)least_remaining(&m->ar, &s) <= budget - 1);
    m->ar.n = top;
    return ok;
}

/* Adds the entry's tokens to bits: all, or for a string near its maxLength those that fit. */
static void add_inside(const Matcher *m, const CacheEntry *e, uint32_t thread, uint64_t *bits) {
    uint32_t room = e->chars ? frame_string_room(m->g, &m->ar.fr[thread]) : UINT32_MAX;
    if (room >= e->max_chars) {
        for (size_t i = 0; i < m->words; i++) bits[i] |= e->bits[i];
        return;
    }
    for (size_t i = 0; i < m->words; i++)
        for (uint64_t x = e->bits[i]; x; x &= x - 1) {
            int32_t id = (int32_t)(i * 64 + (size_t)__builtin_ctzll(x));
            if (e->chars[id] <= room) bits[i] |= 1ull << (id & 63);
        }
}

/* Adds the tokens thread allows to bits. */
static int thread_mask(Matcher *m, uint32_t thread, int64_t budget, uint64_t *bits) {
    int overflow = 0;
    Walk w = {.bits = bits, .budget = budget};
    uint32_t top = m->ar.n;
    CacheEntry *e = cache_entry(m, thread, &overflow);
    if (overflow) return df_fail("internal: more than %d partial matches at once", MATCH_MAX_THREADS);
    int64_t left = budget - 1, have = match_remaining(&m->ar, thread);
    if (budget >= 0 && e->n_inside && have + e->dmin <= left && have + e->dmax > left) {
        /* near the end of the budget: every token checked with the whole thread */
        m->lvl[0].n = 1, m->lvl[0].t[0] = thread;
        m->stats.tight_walks++;
        walk_range(m, &w, 1, m->t->n_nodes);
    } else {
        if (e->n_inside && (budget < 0 || have + e->dmax <= left)) add_inside(m, e, thread, bits);
        walk_dependents(m, &w, thread, e);
    }
    m->ar.n = top;
    if (w.overflow) return df_fail("internal: more than %d partial matches at once", MATCH_MAX_THREADS);
    for (int k = 0; k < GM_N; k++)
        if (m->t->marker[k] >= 0 && marker_allowed(m, thread, k, budget)) set_token(m->t, bits, m->t->marker[k]);
    return 0;
}

int matcher_mask(Matcher *m, int64_t budget, uint64_t *allowed) {
    memset(allowed, 0, m->words * sizeof *allowed);
    m->stats.masks++;
    for (int i = 0; i < m->cur.n; i++)
        if (FR_REAL(m->cur.t[i]) && thread_mask(m, m->cur.t[i], budget, allowed)) return -1;
    int n = 0;
    for (size_t i = 0; i < m->words; i++) n += __builtin_popcountll(allowed[i]);
    return n;
}

/* ------------------------------------------------------------------ advancing */

/* Steps the threads `from` through the units of token into *out (frames go above the arena
 * top). Returns 0, or -1 when more threads arise than MATCH_MAX_THREADS. A token that is no unit
 * sequence (a special token other than the markers, an id outside the vocabulary) leaves *out
 * empty. */
static int step_token(Matcher *m, const Threads *from, int32_t token, Threads *out) {
    const VocabTrie *t = m->t;
    GUnit marker = 0;
    size_t n = 0;
    *out = (Threads){0};
    if (token < 0 || token >= t->n_ids) return 0;
    for (int k = 0; k < GM_N; k++)
        if (t->marker[k] == token) marker = GU_MARKER(k), n = 1;
    if (!n && t->node_of[token]) n = vocab_trie_prefix(t, t->node_of[token], m->bytes);
    Threads a = *from;
    for (size_t i = 0; i < n && a.n; i++) {
        Threads b = {0};
        for (int k = 0; k < a.n; k++) match_step(&m->ar, a.t[k], marker ? marker : m->bytes[i], &b);
        if (b.overflow) return df_fail("internal: more than %d partial matches at once", MATCH_MAX_THREADS);
        a = b;
    }
    if (n) *out = a;
    return 0;
}

int matcher_allows(Matcher *m, int32_t token, int64_t budget) {
    uint32_t top = m->ar.n;
    Threads s;
    int ok = !step_token(m, &m->cur, token, &s) && s.n > 0 &&
             (budget < 0 || (int64_t)least_remaining(&m->ar, &s) <= budget - 1);
    m->ar.n = top;
    return ok;
}

/* Makes `next` the state, its frames copied into a fresh arena. */
static void compact(Matcher *m, const Threads *next) {
    Arena fresh = {.g = m->g};
    Threads out = {0};
    uint32_t chain[GRAMMAR_MAX_FRAMES + 1];
    for (int i = 0; i < next->n; i++) {
        uint32_t t = next->t[i], n = 0;
        for (; FR_REAL(t); t = m->ar.fr[t].parent) chain[n++] = t;
        uint32_t below = FR_DONE;
        while (n) {
            Frame f = m->ar.fr[chain[--n]];
            f.parent = below;
            below = arena_push(&fresh, &f);
        }
        out.t[out.n++] = below;
    }
    free(m->ar.fr);
    m->ar = fresh;
    m->base = fresh.n;
    m->cur = out;
}

int matcher_accept(Matcher *m, int32_t token) {
    uint32_t top = m->ar.n;
    Threads s;
    if (step_token(m, &m->cur, token, &s)) return -1;
    if (s.n == 0) {
        m->ar.n = top;
        return df_fail("token %d is not allowed here by the output constraint", token);
    }
    compact(m, &s);
    return 0;
}

int matcher_done(const Matcher *m) {
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.t[i] == FR_DONE) return 1;
    return 0;
}

uint32_t matcher_min_tokens(const Matcher *m) { return least_remaining(&m->ar, &m->cur); }

size_t matcher_mask_words(const Matcher *m) { return m->words; }

MatcherStats matcher_stats(const Matcher *m) { return m->stats; }

/* ------------------------------------------------------------------ life cycle */

static Matcher *matcher_alloc(const Grammar *g, const VocabTrie *t) {
    Matcher *m = df_calloc(1, sizeof *m);
    m->g = g, m->t = t;
    m->ar.g = g;
    m->lvl = df_calloc(t->max_len + 1, sizeof *m->lvl);
    m->mark = df_calloc(t->max_len + 1, sizeof *m->mark);
    m->bytes = df_malloc(t->max_len + 1);
    m->words = ((size_t)t->n_ids + 63) / 64;
    return m;
}

Matcher *matcher_new(const Grammar *g, const VocabTrie *t) {
    if (g->vocab && g->vocab != t) {
        df_fail("the output constraint was counted for another vocabulary");
        return NULL;
    }
    Matcher *m = matcher_alloc(g, t);
    m->cur.n = 1;
    m->cur.t[0] = match_start(&m->ar);
    m->base = m->ar.n;
    return m;
}

Matcher *matcher_clone(const Matcher *src) {
    Matcher *m = matcher_alloc(src->g, src->t);
    m->ar.cap = m->ar.n = src->base;
    m->ar.fr = df_malloc((size_t)(src->base ? src->base : 1) * sizeof *m->ar.fr);
    memcpy(m->ar.fr, src->ar.fr, (size_t)src->base * sizeof *m->ar.fr);
    m->base = src->base;
    m->cur = src->cur;
    return m;
}

void matcher_free(Matcher *m) {
    if (!m) return;
    for (int i = 0; i < CACHE_ENTRIES; i++) free(m->cache[i].bits), free(m->cache[i].deps), free(m->cache[i].chars);
    free(m->ar.fr), free(m->lvl), free(m->mark), free(m->bytes);
    free(m);
}

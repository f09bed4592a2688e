/* automaton.c - NFAs, DFAs and the operations between them (see automaton.h). */
#include "text/automaton.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* ------------------------------------------------------------------ id maps */

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int key_equal(const IdMap *m, uint32_t id, const void *key, size_t len) {
    return m->off[id + 1] - m->off[id] == len && !memcmp(m->pool + m->off[id], key, len);
}

static void idmap_grow(IdMap *m) {
    uint32_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *slot = df_calloc(cap, sizeof *slot);
    for (uint32_t id = 0; id < m->n; id++) {
        size_t len;
        const void *k = idmap_key(m, id, &len);
        uint32_t i = (uint32_t)hash_bytes(k, len) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = id + 1;
    }
    free(m->slot);
    m->slot = slot, m->cap = cap;
}

uint32_t idmap_get(IdMap *m, const void *key, size_t len, int *added) {
    if (2 * (m->n + 1) > m->cap) idmap_grow(m);
    uint32_t i = (uint32_t)hash_bytes(key, len) & (m->cap - 1);
    for (; m->slot[i]; i = (i + 1) & (m->cap - 1))
        if (key_equal(m, m->slot[i] - 1, key, len)) {
            *added = 0;
            return m->slot[i] - 1;
        }
    if (m->n + 2 > m->cap_keys) {
        m->cap_keys = m->cap_keys ? 2 * m->cap_keys : 64;
        m->off = df_realloc(m->off, m->cap_keys * sizeof *m->off);
    }
    if (m->n_pool + len > m->cap_pool) {
        m->cap_pool = m->cap_pool ? m->cap_pool : 1024;
        while (m->n_pool + len > m->cap_pool) m->cap_pool *= 2;
        m->pool = df_realloc(m->pool, m->cap_pool);
    }
    if (!m->n) m->off[0] = 0;
    if (len) memcpy(m->pool + m->n_pool, key, len);
    m->n_pool += len;
    m->off[m->n + 1] = m->n_pool;
    m->slot[i] = ++m->n;
    *added = 1;
    return m->n - 1;
}

const void *idmap_key(const IdMap *m, uint32_t id, size_t *len) {
    *len = m->off[id + 1] - m->off[id];
    return m->pool + m->off[id];
}

void idmap_free(IdMap *m) {
    free(m->slot), free(m->pool), free(m->off);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ NFAs */

uint32_t nfa_state(Nfa *n) {
    if (n->n_states >= AUTO_MAX_NFA) {
        n->too_big = 1;
        return 0;
    }
    if (n->n_states == n->cap_states) {
        n->cap_states = n->cap_states ? 2 * n->cap_states : 64;
        n->accept = df_realloc(n->accept, n->cap_states);
    }
    n->accept[n->n_states] = 0;
    return n->n_states++;
}

void nfa_edge(Nfa *n, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi) {
    if (n->too_big || n->n_e >= AUTO_MAX_NFA) {
        n->too_big = 1;
        return;
    }
    if (n->n_e == n->cap_e) {
        n->cap_e = n->cap_e ? 2 * n->cap_e : 64;
        n->e = df_realloc(n->e, n->cap_e * sizeof *n->e);
    }
    n->e[n->n_e++] = (NEdge){from, to, lo, hi};
}

void nfa_eps(Nfa *n, uint32_t from, uint32_t to) { nfa_edge(n, from, to, 1, 0); }

void nfa_any(Nfa *n, uint32_t from, uint32_t to) {
    nfa_edge(n, from, to, 1, 0xD7FF);
    nfa_edge(n, from, to, 0xE000, AUTO_MAX_CODE);
}

void nfa_free(Nfa *n) {
    free(n->accept), free(n->e);
    memset(n, 0, sizeof *n);
}

/* ------------------------------------------------------------------ building DFAs */

uint32_t db_state(DfaBuilder *b, int accept) {
    Dfa *d = &b->d;
    if (d->n_states + 1 >= b->cap_states) {
        b->cap_states = b->cap_states ? 2 * b->cap_states : 64;
        d->accept = df_realloc(d->accept, b->cap_states);
        d->first = df_realloc(d->first, (b->cap_states + 1) * sizeof *d->first);
    }
    d->accept[d->n_states] = (uint8_t)(accept != 0);
    return d->n_states++;
}


void db_begin(DfaBuilder *b, uint32_t s) { b->d.first[s] = b->open_first = b->n_e; }

void db_edge(DfaBuilder *b, uint32_t lo, uint32_t hi, uint32_t to) {
    if (b->n_e > b->open_first) {
        AEdge *last = &b->d.e[b->n_e - 1];
        if (last->to == to && last->hi + 1 == lo) {
            last->hi = hi;
            return;
        }
    }
    if (b->n_e == b->cap_e) {
        b->cap_e = b->cap_e ? 2 * b->cap_e : 64;
        b->d.e = df_realloc(b->d.e, b->cap_e * sizeof *b->d.e);
    }
    b->d.e[b->n_e++] = (AEdge){lo, hi, to};
}

void db_finish(DfaBuilder *b) {
    if (!b->d.n_states) db_state(b, 0), db_begin(b, 0);
    b->d.first[b->d.n_states] = b->n_e;
}

void dfa_free(Dfa *d) {
    free(d->first), free(d->e), free(d->accept);
    memset(d, 0, sizeof *d);
}

/* Drops a DFA a builder failed to finish. */
static int too_many(Dfa *d, const char *what, uint32_t max_states) {
    dfa_free(d);
    return df_fail("%s needs an automaton of more than %u states: simplify it", what, max_states);
}

/* ------------------------------------------------------------------ the subset construction */

typedef struct {
    const Nfa *n;
    uint32_t *off, *idx;  /* edges of state s: n->e[idx[off[s] .. off[s + 1])] */
    uint32_t *mark, gen;
    uint32_t *stack, *set;
} Closure;

static void closure_init(Closure *c, const Nfa *n) {
    memset(c, 0, sizeof *c);
    c->n = n;
    uint32_t ns = n->n_states ? n->n_states : 1;
    c->off = df_calloc(ns + 1, sizeof *c->off);
    c->idx = df_malloc((n->n_e ? n->n_e : 1) * sizeof *c->idx);
    for (uint32_t i = 0; i < n->n_e; i++) c->off[n->e[i].from + 1]++;
    for (uint32_t s = 0; s < ns; s++) c->off[s + 1] += c->off[s];
    uint32_t *fill = df_malloc(ns * sizeof *fill);
    memcpy(fill, c->off, ns * sizeof *fill);
    for (uint32_t i = 0; i < n->n_e; i++) c->idx[fill[n->e[i].from]++] = i;
    free(fill);
    c->mark = df_calloc(ns, sizeof *c->mark);
    c->stack = df_malloc(ns * sizeof *c->stack);
    c->set = df_malloc(ns * sizeof *c->set);
}

static void closure_free(Closure *c) { free(c->off), free(c->idx), free(c->mark), free(c->stack), free(c->set); }

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The states reachable from seeds by epsilon edges, sorted, into c->set; returns the count. */
static uint32_t closure(Closure *c, const uint32_t *seeds, uint32_t n_seeds) {
    uint32_t sp = 0, k = 0;
    if (++c->gen == 0) memset(c->mark, 0, c->n->n_states * sizeof *c->mark), c->gen = 1;
    for (uint32_t i = 0; i < n_seeds; i++)
        if (c->mark[seeds[i]] != c->gen) c->mark[seeds[i]] = c->gen, c->stack[sp++] = seeds[i];
    while (sp) {
        uint32_t s = c->stack[--sp];
        c->set[k++] = s;
        for (uint32_t j = c->off[s]; j < c->off[s + 1]; j++) {
            const NEdge *e = &c->n->e[c->idx[j]];
            if (e->lo > e->hi && c->mark[e->to] != c->gen) c->mark[e->to] = c->gen, c->stack[sp++] = e->to;
        }
    }
    qsort(c->set, k, sizeof *c->set, cmp_u32);
    return k;
}

typedef struct {
    uint32_t pos, to;
    int add;
} Event;

static int cmp_event(const void *a, const void *b) {
    const Event *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* A state for the set c->set[0..k): its id, new ones added to the builder and the map. */
static int64_t set_state(Closure *c, uint32_t k, IdMap *map, DfaBuilder *b, uint32_t max_states) {
    int added;
    uint32_t id = idmap_get(map, c->set, k * sizeof *c->set, &added);
    if (!added) return id;
    if (id >= max_states) return -1;
    int acc = 0;
    for (uint32_t i = 0; i < k && !acc; i++) acc = c->n->accept[c->set[i]];
    db_state(b, acc);
    return id;
}

/* Active NFA targets during the sweep of one DFA state's edges: each with a count of the edges
 * covering the current position. */
typedef struct {
    uint32_t *count, *at, *list, n;
} Active;

static void active_change(Active *a, uint32_t to, int add) {
    if (add) {
        if (a->count[to]++ == 0) a->at[to] = a->n, a->list[a->n++] = to;
    } else if (--a->count[to] == 0) {
        uint32_t i = a->at[to], last = a->list[--a->n];
        a->list[i] = last, a->at[last] = i;
    }
}

/* The edges of DFA state s (its NFA states in members[0..m)). Returns 0, or -1 when too many
 * states arise. */
static int subset_edges(Closure *c, const uint32_t *members, uint32_t m, IdMap *map, DfaBuilder *b, Active *act,
                        Event **ev, uint32_t *cap_ev, uint32_t max_states) {
    uint32_t n_ev = 0;
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t j = c->off[members[i]]; j < c->off[members[i] + 1]; j++) {
            const NEdge *e = &c->n->e[c->idx[j]];
            if (e->lo > e->hi) continue;
            if (n_ev + 2 > *cap_ev) *cap_ev = *cap_ev ? 2 * *cap_ev : 256, *ev = df_realloc(*ev, *cap_ev * sizeof **ev);
            (*ev)[n_ev++] = (Event){e->lo, e->to, 1};
            (*ev)[n_ev++] = (Event){e->hi + 1, e->to, 0};
        }
    if (n_ev) qsort(*ev, n_ev, sizeof **ev, cmp_event);
    for (uint32_t i = 0; i < n_ev;) {
        uint32_t p = (*ev)[i].pos;
        for (; i < n_ev && (*ev)[i].pos == p; i++) active_change(act, (*ev)[i].to, (*ev)[i].add);
        if (!act->n || i == n_ev) continue;
        uint32_t k = closure(c, act->list, act->n);
        int64_t id = set_state(c, k, map, b, max_states);
        if (id < 0) return -1;
        db_edge(b, p, (*ev)[i].pos - 1, (uint32_t)id);
    }
    return 0;
}

int dfa_from_nfa(const Nfa *n, uint32_t start, uint32_t max_states, const char *what, Dfa *out) {
    memset(out, 0, sizeof *out);
    if (n->too_big) return too_many(out, what, AUTO_MAX_NFA);
    Closure c;
    closure_init(&c, n);
    IdMap map = {0};
    DfaBuilder b = {0};
    Active act = {df_calloc(n->n_states, sizeof(uint32_t)), df_malloc(n->n_states * sizeof(uint32_t)),
                  df_malloc(n->n_states * sizeof(uint32_t)), 0};
    Event *ev = NULL;
    uint32_t cap_ev = 0, *members = df_malloc(n->n_states * sizeof *members);
    int rc = set_state(&c, closure(&c, &start, 1), &map, &b, max_states) < 0 ? -1 : 0;
    for (uint32_t s = 0; !rc && s < b.d.n_states; s++) {
        size_t len;
        const void *key = idmap_key(&map, s, &len);
        memcpy(members, key, len); /* the map's pool moves as states are added */
        db_begin(&b, s);
        rc = subset_edges(&c, members, (uint32_t)(len / sizeof *members), &map, &b, &act, &ev, &cap_ev, max_states);
    }
    db_finish(&b);
    *out = b.d;
    free(members), free(ev), free(act.count), free(act.at), free(act.list);
    idmap_free(&map);
    closure_free(&c);
    return rc ? too_many(out, what, max_states) : 0;
}

/* ------------------------------------------------------------------ products and lengths */

int dfa_intersect(const Dfa *a, const Dfa *b, uint32_t max_states, const char *what, Dfa *out) {
    IdMap map = {0};
    DfaBuilder db = {0};
    uint32_t pair[2] = {0, 0};
    int added, rc = 0;
    idmap_get(&map, pair, sizeof pair, &added);
    db_state(&db, a->accept[0] && b->accept[0]);
    for (uint32_t s = 0; s < db.d.n_states && !rc; s++) {
        size_t len;
        memcpy(pair, idmap_key(&map, s, &len), sizeof pair);
        db_begin(&db, s);
        uint32_t i = a->first[pair[0]], ie = a->first[pair[0] + 1], j = b->first[pair[1]], je = b->first[pair[1] + 1];
        while (i < ie && j < je && !rc) {
            const AEdge *x = &a->e[i], *y = &b->e[j];
            uint32_t lo = x->lo > y->lo ? x->lo : y->lo, hi = x->hi < y->hi ? x->hi : y->hi;
            if (lo <= hi) {
                uint32_t to[2] = {x->to, y->to}, id = idmap_get(&map, to, sizeof to, &added);
                if (added && id >= max_states) rc = -1;
                else {
                    if (added) db_state(&db, a->accept[x->to] && b->accept[y->to]);
                    db_edge(&db, lo, hi, id);
                }
            }
            if (x->hi < y->hi) i++;
            else j++;
        }
    }
    db_finish(&db);
    *out = db.d;
    idmap_free(&map);
    return rc ? too_many(out, what, max_states) : 0;
}

int dfa_length(uint32_t min, uint32_t max, uint32_t max_states, const char *what, Dfa *out) {
    uint32_t top = max == UINT32_MAX ? min : max;
    memset(out, 0, sizeof *out);
    if (top >= max_states) return too_many(out, what, max_states);
    DfaBuilder b = {0};
    for (uint32_t i = 0; i <= top; i++) db_state(&b, i >= min);
    for (uint32_t i = 0; i <= top; i++) {
        db_begin(&b, i);
        uint32_t next = i < top ? i + 1 : i;
        if (i < top || max == UINT32_MAX) db_edge(&b, 1, 0xD7FF, next), db_edge(&b, 0xE000, AUTO_MAX_CODE, next);
    }
    db_finish(&b);
    *out = b.d;
    return 0;
}

/* ------------------------------------------------------------------ pruning and distances */

/* For each state, the states with an edge into it (CSR). */
static void predecessors(const Dfa *d, uint32_t **off, uint32_t **pred) {
    uint32_t n = d->n_states, ne = d->first[n];
    *off = df_calloc(n + 1, sizeof **off);
    *pred = df_malloc((ne ? ne : 1) * sizeof **pred);
    for (uint32_t i = 0; i < ne; i++) (*off)[d->e[i].to + 1]++;
    for (uint32_t s = 0; s < n; s++) (*off)[s + 1] += (*off)[s];
    uint32_t *fill = df_malloc((n ? n : 1) * sizeof *fill);
    memcpy(fill, *off, n * sizeof *fill);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t i = d->first[s]; i < d->first[s + 1]; i++) (*pred)[fill[d->e[i].to]++] = s;
    free(fill);
}

void dfa_distances(const Dfa *d, uint32_t *dist) {
    uint32_t n = d->n_states, *off, *pred, *queue = df_malloc((n ? n : 1) * sizeof *queue), head = 0, tail = 0;
    predecessors(d, &off, &pred);
    for (uint32_t s = 0; s < n; s++) {
        dist[s] = d->accept[s] ? 0 : UINT32_MAX;
        if (d->accept[s]) queue[tail++] = s;
    }
    while (head < tail) {
        uint32_t t = queue[head++];
        for (uint32_t i = off[t]; i < off[t + 1]; i++)
            if (dist[pred[i]] == UINT32_MAX) dist[pred[i]] = dist[t] + 1, queue[tail++] = pred[i];
    }
    free(off), free(pred), free(queue);
}

int dfa_prune(Dfa *d) {
    uint32_t n = d->n_states, *dist = df_malloc((n ? n : 1) * sizeof *dist), *map = df_malloc((n ? n : 1) * sizeof *map);
    dfa_distances(d, dist);
    int empty = dist[0] == UINT32_MAX;
    uint32_t kept = 0, ne = 0;
    for (uint32_t s = 0; s < n; s++) map[s] = !empty && dist[s] != UINT32_MAX ? kept++ : UINT32_MAX;
    if (empty) kept = 1, map[0] = 0;
    for (uint32_t s = 0; s < n; s++) { /* in place: kept states and edges only move down */
        if (map[s] == UINT32_MAX) continue;
        uint32_t from = d->first[s], to = d->first[s + 1];
        d->first[map[s]] = ne;
        d->accept[map[s]] = (uint8_t)(d->accept[s] && !empty);
        for (uint32_t i = from; i < to && !empty; i++)
            if (map[d->e[i].to] != UINT32_MAX) d->e[ne] = d->e[i], d->e[ne++].to = map[d->e[i].to];
    }
    d->n_states = kept;
    d->first[kept] = ne;
    free(dist), free(map);
    return empty;
}

/* ------------------------------------------------------------------ spelling code points as bytes */

/* The byte NFA being built from a code-point DFA. States that only lead on to a target (the
 * continuation bytes of a character, what follows a backslash) are shared between every state
 * with an edge into that target: the NFA grows with the DFA's states, not with its edges. */
typedef struct {
    Nfa n;
    IdMap tails;        /* (target, byte ranges still to come) -> the state before them */
    uint32_t *tail_state;
    uint32_t cap_tails;
} Speller;

/* The state from which the byte ranges lo[0..len), hi[0..len) lead to `to`. */
static uint32_t tail(Speller *sp, uint32_t to, const uint8_t *lo, const uint8_t *hi, int len) {
    if (len == 0) return to;
    uint8_t key[4 + 2 * 4];
    memcpy(key, &to, 4);
    for (int i = 0; i < len; i++) key[4 + 2 * i] = lo[i], key[5 + 2 * i] = hi[i];
    int added;
    uint32_t id = idmap_get(&sp->tails, key, 4 + 2 * (size_t)len, &added);
    if (!added) return sp->tail_state[id];
    if (id >= sp->cap_tails) {
        sp->cap_tails = sp->cap_tails ? 2 * sp->cap_tails : 256;
        sp->tail_state = df_realloc(sp->tail_state, sp->cap_tails * sizeof *sp->tail_state);
    }
    uint32_t next = tail(sp, to, lo + 1, hi + 1, len - 1), s = nfa_state(&sp->n);
    sp->tail_state[id] = s;
    nfa_edge(&sp->n, s, next, lo[0], hi[0]);
    return s;
}

static int utf8_encode(uint32_t cp, uint8_t *b) {
    if (cp < 0x80) return b[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return b[0] = (uint8_t)(0xC0 | cp >> 6), b[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return b[0] = (uint8_t)(0xE0 | cp >> 12), b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), b[2] = (uint8_t)(0x80 | (cp & 0x3F)), 3;
    b[0] = (uint8_t)(0xF0 | cp >> 18), b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Edges from -> to for the code points lo..hi (no surrogates), as byte-range sequences: the
 * range is split until every byte position ranges independently (the same encoded length, and
 * below each position either the whole continuation range or one value above it). */
static void utf8_ranges(Speller *sp, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi) {
    static const uint32_t last_of_len[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++)
        if (lo <= last_of_len[k] && hi > last_of_len[k]) {
            utf8_ranges(sp, from, to, lo, last_of_len[k]);
            utf8_ranges(sp, from, to, last_of_len[k] + 1, hi);
            return;
        }
    uint8_t a[4], b[4];
    int len = utf8_encode(lo, a);
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            utf8_ranges(sp, from, to, lo, lo | m);
            utf8_ranges(sp, from, to, (lo | m) + 1, hi);
            return;
        }
        if ((hi & m) != m) {
            utf8_ranges(sp, from, to, lo, (hi & ~m) - 1);
            utf8_ranges(sp, from, to, hi & ~m, hi);
            return;
        }
    }
    utf8_encode(hi, b);
    nfa_edge(&sp->n, from, tail(sp, to, a + 1, b + 1, len - 1), a[0], b[0]);
}

/* The characters a JSON string writes with a two-character escape, and the letter after '\'. */
static const struct {
    uint8_t c, letter;
} escapes[] = {{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}, {'"', '"'}, {'\\', '\\'}};

/* JSON: the escaped characters of lo..hi become '\' then their letter (the other controls are
 * never written: they would need \u00XX); the rest, and everything in raw text, is UTF-8. */
static void spell_range(Speller *sp, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi, int json) {
    if (!json) {
        utf8_ranges(sp, from, to, lo, hi);
        return;
    }
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++)
        if (escapes[i].c >= lo && escapes[i].c <= hi) {
            uint8_t l = escapes[i].letter;
            nfa_edge(&sp->n, from, tail(sp, to, &l, &l, 1), '\\', '\\');
        }
    static const uint32_t plain[3][2] = {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, AUTO_MAX_CODE}};
    for (int k = 0; k < 3; k++) {
        uint32_t a = lo > plain[k][0] ? lo : plain[k][0], b = hi < plain[k][1] ? hi : plain[k][1];
        if (a <= b) utf8_ranges(sp, from, to, a, b);
    }
}

int dfa_spell_utf8(const Dfa *cp, int json, uint32_t max_states, const char *what, Dfa *out) {
    Speller sp = {0};
    for (uint32_t s = 0; s < cp->n_states; s++) nfa_state(&sp.n);
    uint32_t start = 0;
    if (json) {
        uint32_t open = nfa_state(&sp.n), end = nfa_state(&sp.n);
        sp.n.accept[end] = 1;
        nfa_edge(&sp.n, open, 0, '"', '"');
        for (uint32_t s = 0; s < cp->n_states; s++)
            if (cp->accept[s]) nfa_edge(&sp.n, s, end, '"', '"');
        start = open;
    } else
        for (uint32_t s = 0; s < cp->n_states; s++) sp.n.accept[s] = cp->accept[s];
    for (uint32_t s = 0; s < cp->n_states && !sp.n.too_big; s++)
        for (uint32_t i = cp->first[s]; i < cp->first[s + 1]; i++) spell_range(&sp, s, cp->e[i].to, cp->e[i].lo, cp->e[i].hi, json);
    int rc = dfa_from_nfa(&sp.n, start, max_states, what, out);
    nfa_free(&sp.n);
    idmap_free(&sp.tails);
    free(sp.tail_state);
    return rc;
}

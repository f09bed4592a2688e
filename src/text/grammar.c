/* grammar.c - building a Grammar and analysing it for the matcher (see grammar.h): which nodes
 * may match nothing, which need a call index, how short a match of each node can be for every
 * nesting budget, and whether anyOf ambiguity stays bounded. */
#include "text/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "text/automaton.h"
#include "text/vocab_trie.h"
#include "util/err.h"
#include "util/platform.h"

Grammar *grammar_new(void) { return df_calloc(1, sizeof(Grammar)); }

void grammar_free(Grammar *g) {
    if (!g) return;
    free(g->nodes), free(g->kids), free(g->lits), free(g->members), free(g->units);
    free(g->dstates), free(g->dedges);
    free(g->nullable), free(g->needs_ord), free(g->minlen), free(g->ucost);
    free(g);
}

/* Grows an array to hold `more` further elements, unless that passes `limit` (then too_big). */
static int grow(Grammar *g, void **p, uint32_t *cap, uint32_t n, size_t more, size_t elem, uint32_t limit) {
    if (more > limit || n > limit - more) {
        g->too_big = 1;
        return -1;
    }
    if (n + more <= *cap) return 0;
    uint32_t c = *cap ? *cap : 16;
    while (c < n + more) c = c > limit / 2 ? limit : c * 2;
    *p = df_realloc(*p, (size_t)c * elem);
    *cap = c;
    return 0;
}

GSpan gb_units(Grammar *g, const GUnit *u, size_t n) {
    if (grow(g, (void **)&g->units, &g->cap_units, g->n_units, n, sizeof(GUnit), GRAMMAR_MAX_UNITS)) return (GSpan){0, 0};
    GSpan s = {g->n_units, (uint32_t)n};
    if (n) memcpy(g->units + g->n_units, u, n * sizeof(GUnit));
    g->n_units += (uint32_t)n;
    return s;
}

GSpan gb_text(Grammar *g, const char *s, size_t n) {
    if (grow(g, (void **)&g->units, &g->cap_units, g->n_units, n, sizeof(GUnit), GRAMMAR_MAX_UNITS)) return (GSpan){0, 0};
    GSpan sp = {g->n_units, (uint32_t)n};
    for (size_t i = 0; i < n; i++) g->units[g->n_units++] = (unsigned char)s[i];
    return sp;
}

GSpan gb_join(Grammar *g, const GSpan *s, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += s[i].len;
    if (grow(g, (void **)&g->units, &g->cap_units, g->n_units, total, sizeof(GUnit), GRAMMAR_MAX_UNITS)) return (GSpan){0, 0};
    GSpan out = {g->n_units, (uint32_t)total};
    for (size_t i = 0; i < n; i++) {
        memmove(g->units + g->n_units, g->units + s[i].off, s[i].len * sizeof(GUnit));
        g->n_units += s[i].len;
    }
    return out;
}

static uint32_t add_node(Grammar *g, GNode n) {
    if (grow(g, (void **)&g->nodes, &g->cap_nodes, g->n_nodes, 1, sizeof(GNode), GRAMMAR_MAX_NODES)) return 0;
    g->nodes[g->n_nodes] = n;
    return g->n_nodes++;
}

/* Appends ids to kids; returns the first index (0 when too big). */
static uint32_t add_kids(Grammar *g, const uint32_t *ids, size_t n) {
    if (grow(g, (void **)&g->kids, &g->cap_kids, g->n_kids, n, sizeof(uint32_t), 4 * GRAMMAR_MAX_NODES)) return 0;
    uint32_t first = g->n_kids;
    if (n) memcpy(g->kids + first, ids, n * sizeof(uint32_t));
    g->n_kids += (uint32_t)n;
    return first;
}

uint32_t gb_seq(Grammar *g, const uint32_t *kids, size_t n) {
    uint32_t first = add_kids(g, kids, n);
    return add_node(g, (GNode){.kind = GK_SEQ, .first = first, .n = (uint32_t)n});
}

uint32_t gb_choice(Grammar *g, const uint32_t *alts, size_t n) {
    if (n == 1) return alts[0];
    uint32_t first = add_kids(g, alts, n);
    return add_node(g, (GNode){.kind = GK_CHOICE, .first = first, .n = (uint32_t)n});
}

int gu_cmp(const GUnit *a, uint32_t na, const GUnit *b, uint32_t nb) {
    uint32_t n = na < nb ? na : nb;
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

static int span_cmp(const void *x, const void *y, void *ctx) {
    const Grammar *g = ctx;
    const GSpan *a = x, *b = y;
    return gu_cmp(gu(g, *a), a->len, gu(g, *b), b->len);
}

static int span_eq(const Grammar *g, GSpan a, GSpan b) { return !gu_cmp(gu(g, a), a.len, gu(g, b), b.len); }

/* Copies spans into g->lits sorted (and without duplicates when dedup); returns the first index. */
static uint32_t add_sorted_lits(Grammar *g, const GSpan *lits, size_t n, uint32_t *n_out) {
    if (grow(g, (void **)&g->lits, &g->cap_lits, g->n_lits, n, sizeof(GSpan), GRAMMAR_MAX_LITS)) {
        *n_out = 0;
        return 0;
    }
    uint32_t first = g->n_lits, k = 0;
    GSpan *dst = g->lits + first;
    memcpy(dst, lits, n * sizeof(GSpan));
    plat_qsort_r(dst, n, sizeof(GSpan), span_cmp, g);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || !span_eq(g, dst[k - 1], dst[i])) dst[k++] = dst[i];
    g->n_lits += k;
    *n_out = k;
    return first;
}

uint32_t gb_lit(Grammar *g, const GSpan *lits, size_t n) {
    uint32_t k, first = add_sorted_lits(g, lits, n, &k);
    return add_node(g, (GNode){.kind = GK_LIT, .first = first, .n = k});
}

uint32_t gb_lit1(Grammar *g, GSpan lit) { return gb_lit(g, &lit, 1); }

typedef struct {
    GSpan lit;
    uint32_t cont;
} LitCont;

static int litcont_cmp(const void *x, const void *y, void *ctx) { return span_cmp(&((const LitCont *)x)->lit, &((const LitCont *)y)->lit, ctx); }

uint32_t gb_switch(Grammar *g, const GSpan *lits, const uint32_t *conts, size_t n) {
    if (n == 0 || n > GRAMMAR_MAX_LITS) {
        g->too_big = 1;
        return 0;
    }
    LitCont *lc = df_malloc(n * sizeof *lc);
    for (size_t i = 0; i < n; i++) lc[i] = (LitCont){lits[i], conts[i]};
    plat_qsort_r(lc, n, sizeof *lc, litcont_cmp, g);
    for (size_t i = 0; i < n; i++) {
        int prefix = i + 1 < n && lc[i].lit.len <= lc[i + 1].lit.len &&
                     !gu_cmp(gu(g, lc[i].lit), lc[i].lit.len, gu(g, lc[i + 1].lit), lc[i].lit.len);
        if (lc[i].lit.len == 0 || prefix) g->too_big = 1; /* a builder bug, refused like a size cap */
    }
    uint32_t first = 0, item = 0;
    if (!grow(g, (void **)&g->lits, &g->cap_lits, g->n_lits, n, sizeof(GSpan), GRAMMAR_MAX_LITS)) {
        first = g->n_lits;
        for (size_t i = 0; i < n; i++) g->lits[g->n_lits++] = lc[i].lit;
    }
    uint32_t *ids = df_malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = lc[i].cont;
    item = add_kids(g, ids, n);
    free(ids), free(lc);
    return add_node(g, (GNode){.kind = GK_SWITCH, .first = first, .n = (uint32_t)n, .item = item});
}

uint32_t gb_repeat(Grammar *g, uint32_t item, uint32_t min, uint32_t max, GSpan open, GSpan sep, GSpan close, int numbered) {
    return add_node(g, (GNode){.kind = GK_REPEAT, .item = item, .min = min, .max = max, .open = open, .sep = sep,
                               .close = close, .numbered = (uint8_t)numbered});
}

uint32_t gb_members(Grammar *g, const GMember *m, size_t n, GSpan open, GSpan sep, GSpan close) {
    uint32_t first = 0;
    if (grow(g, (void **)&g->members, &g->cap_members, g->n_members, n, sizeof(GMember), GRAMMAR_MAX_LITS)) n = 0;
    else {
        first = g->n_members;
        if (n) memcpy(g->members + first, m, n * sizeof *m);
        g->n_members += (uint32_t)n;
    }
    return add_node(g, (GNode){.kind = GK_MEMBERS, .first = first, .n = (uint32_t)n, .open = open, .sep = sep, .close = close});
}

uint32_t gb_leaf(Grammar *g, GKind kind, uint32_t min, uint32_t max, int integer) {
    return add_node(g, (GNode){.kind = (uint8_t)kind, .min = min, .max = max, .integer = (uint8_t)integer});
}

uint32_t gb_dfa(Grammar *g, const Dfa *d) {
    uint32_t n = d->n_states, ne = d->first[n];
    if (grow(g, (void **)&g->dstates, &g->cap_dstates, g->n_dstates, n, sizeof(GDState), GRAMMAR_MAX_DSTATES) ||
        grow(g, (void **)&g->dedges, &g->cap_dedges, g->n_dedges, ne, sizeof(GDEdge), GRAMMAR_MAX_DEDGES))
        return 0;
    uint32_t base = g->n_dstates, *dist = df_malloc(n * sizeof *dist);
    dfa_distances(d, dist);
    for (uint32_t s = 0; s < n; s++) {
        g->dstates[base + s] = (GDState){g->n_dedges, d->first[s + 1] - d->first[s], dist[s], d->accept[s]};
        for (uint32_t i = d->first[s]; i < d->first[s + 1]; i++)
            g->dedges[g->n_dedges++] = (GDEdge){(uint8_t)d->e[i].lo, (uint8_t)d->e[i].hi, base + d->e[i].to};
    }
    g->n_dstates += n;
    free(dist);
    return add_node(g, (GNode){.kind = GK_DFA, .first = base, .n = n});
}

uint32_t gb_forward(Grammar *g) { return add_node(g, (GNode){.kind = GK_CHOICE}); }

void gb_resolve(Grammar *g, uint32_t fwd, uint32_t target) {
    uint32_t first = add_kids(g, &target, 1);
    if (!g->too_big) g->nodes[fwd].first = first, g->nodes[fwd].n = 1;
}

uint32_t grammar_digits(uint32_t n) {
    uint32_t d = 1;
    while (n >= 10) n /= 10, d++;
    return d;
}

/* ---------------------------------------------------------------- analysis */

/* The number of nodes a node refers to, and the i-th of them. */
static uint32_t n_edges(const Grammar *g, uint32_t id) {
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case GK_SEQ:
    case GK_CHOICE:
    case GK_SWITCH:
    case GK_MEMBERS: return n->n;
    case GK_REPEAT: return 1;
    default: return 0;
    }
}

static uint32_t edge_at(const Grammar *g, uint32_t id, uint32_t i) {
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case GK_REPEAT: return n->item;
    case GK_MEMBERS: return g->members[n->first + i].value;
    case GK_SWITCH: return g->kids[n->item + i];
    default: return g->kids[n->first + i];
    }
}

/* Depth-first post-order of every node reachable from root (children before parents, except
 * along cycles), with an explicit stack. When only_choice, follows CHOICE->alternative edges
 * between CHOICE nodes only and fails on a cycle (an alternative that refers to itself without
 * a frame in between would make the matcher recurse forever). Returns the count, or -1. */
static int64_t post_order(const Grammar *g, uint32_t root, int only_choice, uint32_t *order) {
    uint8_t *color = df_calloc(g->n_nodes, 1); /* 0 new, 1 on the stack, 2 done */
    uint32_t *stack = df_malloc((size_t)g->n_nodes * sizeof *stack), *next = df_malloc((size_t)g->n_nodes * sizeof *next);
    int64_t n_out = 0;
    uint32_t sp = 0;
    stack[sp] = root, next[sp++] = 0, color[root] = 1;
    while (sp) {
        uint32_t id = stack[sp - 1], deg = only_choice && g->nodes[id].kind != GK_CHOICE ? 0 : n_edges(g, id);
        if (next[sp - 1] < deg) {
            uint32_t e = edge_at(g, id, next[sp - 1]++);
            if (only_choice && g->nodes[e].kind != GK_CHOICE) continue;
            if (color[e] == 1 && only_choice) {
                n_out = -1;
                break;
            }
            if (color[e]) continue;
            color[e] = 1;
            stack[sp] = e, next[sp++] = 0;
        } else {
            color[id] = 2;
            order[n_out++] = id;
            sp--;
        }
    }
    free(color), free(stack), free(next);
    return n_out;
}

static int lit_has_empty(const Grammar *g, const GNode *n) {
    for (uint32_t i = 0; i < n->n; i++)
        if (g->lits[n->first + i].len == 0) return 1;
    return 0;
}

static int members_nullable(const Grammar *g, const GNode *n) {
    if (n->open.len || n->close.len) return 0;
    for (uint32_t i = 0; i < n->n; i++)
        if (g->members[n->first + i].required) return 0;
    return 1;
}

/* Least fixpoint of `nullable`, iterated in post-order until stable. */
static int compute_nullable(Grammar *g, const uint32_t *order, uint32_t n_order) {
    g->nullable = df_calloc(g->n_nodes, 1);
    for (int pass = 0; pass < 64; pass++) {
        int changed = 0;
        for (uint32_t o = 0; o < n_order; o++) {
            uint32_t id = order[o];
            const GNode *n = &g->nodes[id];
            int v = 0;
            switch (n->kind) {
            case GK_SEQ:
                v = 1;
                for (uint32_t i = 0; i < n->n && v; i++) v = g->nullable[g->kids[n->first + i]];
                break;
            case GK_CHOICE:
                for (uint32_t i = 0; i < n->n && !v; i++) v = g->nullable[g->kids[n->first + i]];
                break;
            case GK_REPEAT: v = !n->open.len && !n->close.len && n->min == 0; break;
            case GK_LIT: v = lit_has_empty(g, n); break;
            case GK_FREE: v = 1; break;
            case GK_RAWSTR: v = n->min == 0; break;
            case GK_MEMBERS: v = members_nullable(g, n); break;
            case GK_DFA: v = g->dstates[n->first].accept; break;
            default: v = 0; break;
            }
            if (v != g->nullable[id]) g->nullable[id] = (uint8_t)v, changed = 1;
        }
        if (!changed) return 0;
    }
    return df_fail("grammar too intricate (nullable analysis did not settle)");
}

/* needs_ord: a COUNTER can be reached without crossing a numbered REPEAT, so frames of this
 * node carry the call index down. */
static int compute_needs_ord(Grammar *g, const uint32_t *order, uint32_t n_order) {
    g->needs_ord = df_calloc(g->n_nodes, 1);
    int rc = -1;
    for (int pass = 0; pass < 64 && rc; pass++) {
        int changed = 0;
        for (uint32_t o = 0; o < n_order; o++) {
            uint32_t id = order[o];
            const GNode *n = &g->nodes[id];
            int v = n->kind == GK_COUNTER;
            if (n->kind != GK_REPEAT || !n->numbered)
                for (uint32_t i = 0; i < n_edges(g, id) && !v; i++) v = g->needs_ord[edge_at(g, id, i)];
            if (v != g->needs_ord[id]) g->needs_ord[id] = (uint8_t)v, changed = 1;
        }
        if (!changed) rc = 0;
    }
    return rc ? df_fail("grammar too intricate (index analysis did not settle)") : 0;
}

static uint32_t sat_add(uint32_t a, uint32_t b) { return a >= GRAMMAR_INF || b >= GRAMMAR_INF || a + b >= GRAMMAR_INF ? GRAMMAR_INF : a + b; }

static uint32_t sat_mul(uint32_t a, uint32_t k) {
    if (a == 0 || k == 0) return 0;
    if (a >= GRAMMAR_INF || k >= GRAMMAR_INF / a) return GRAMMAR_INF;
    return a * k;
}

/* Fewest tokens of a frame node's match with children limited to row `prev`. */
static uint32_t frame_minlen(const Grammar *g, const GNode *n, const uint32_t *prev) {
    uint32_t v = 0;
    switch (n->kind) {
    case GK_SEQ:
        for (uint32_t i = 0; i < n->n; i++) v = sat_add(v, prev[g->kids[n->first + i]]);
        return v;
    case GK_REPEAT:
        v = span_cost(g, n->open, 0) + span_cost(g, n->close, 0);
        if (n->min) v = sat_add(v, sat_add(sat_mul(prev[n->item], n->min), sat_mul(span_cost(g, n->sep, 0), n->min - 1)));
        return v;
    case GK_LIT:
        v = GRAMMAR_INF;
        for (uint32_t i = 0; i < n->n; i++)
            if (span_cost(g, g->lits[n->first + i], 0) < v) v = span_cost(g, g->lits[n->first + i], 0);
        return v;
    case GK_SWITCH:
        v = GRAMMAR_INF;
        for (uint32_t i = 0; i < n->n; i++) {
            uint32_t c = sat_add(span_cost(g, g->lits[n->first + i], 0), prev[g->kids[n->item + i]]);
            if (c < v) v = c;
        }
        return v;
    case GK_MEMBERS: {
        uint32_t req = 0;
        v = span_cost(g, n->open, 0) + span_cost(g, n->close, 0);
        for (uint32_t i = 0; i < n->n; i++) {
            const GMember *m = &g->members[n->first + i];
            if (m->required) v = sat_add(v, sat_add(span_cost(g, m->key, 0), prev[m->value])), req++;
        }
        return req ? sat_add(v, sat_mul(span_cost(g, n->sep, 0), req - 1)) : v;
    }
    case GK_FREE: return 0;
    case GK_RAWSTR: return n->min;
    case GK_JSTRING: return sat_add(n->min, 2);
    case GK_DFA: return g->dstates[n->first].dist;
    default: return 1; /* NUMBER, COUNTER */
    }
}

/* minlen rows for rooms 0, 1, ... until a row repeats (or GRAMMAR_MAX_FRAMES). Nullable nodes
 * are 0 at every room: skipping them takes no frame. clamp: every finite length counts as 1, so
 * the rows say only whether a match fits in the room at all (why a grammar failed: nesting, or
 * a shortest match past GRAMMAR_INF tokens). */
static void compute_minlen(Grammar *g, const uint32_t *order, uint32_t n_order, const uint32_t *corder, uint32_t n_corder,
                           int clamp) {
    size_t nn = g->n_nodes, cap = 8; /* rows, grown as needed: most grammars settle in a few */
    g->minlen = df_malloc(cap * nn * sizeof *g->minlen);
    uint32_t r;
    for (r = 0; r <= GRAMMAR_MAX_FRAMES; r++) {
        if (r == cap) cap = cap * 2 < GRAMMAR_MAX_FRAMES + 1 ? cap * 2 : GRAMMAR_MAX_FRAMES + 1,
                      g->minlen = df_realloc(g->minlen, cap * nn * sizeof *g->minlen);
        uint32_t *row = g->minlen + r * nn, *prev = r ? row - nn : NULL;
        for (size_t i = 0; i < nn; i++) row[i] = GRAMMAR_INF;
        for (uint32_t o = 0; o < n_order; o++) {
            uint32_t id = order[o];
            const GNode *n = &g->nodes[id];
            if (g->nullable[id]) row[id] = 0;
            else if (n->kind != GK_CHOICE && r) row[id] = frame_minlen(g, n, prev);
            if (clamp && row[id] && row[id] < GRAMMAR_INF) row[id] = 1;
        }
        for (uint32_t o = 0; o < n_corder; o++) { /* CHOICE nodes, alternatives first */
            uint32_t id = corder[o];
            const GNode *n = &g->nodes[id];
            for (uint32_t i = 0; i < n->n; i++)
                if (row[g->kids[n->first + i]] < row[id]) row[id] = row[g->kids[n->first + i]];
        }
        if (r && !memcmp(row, prev, nn * sizeof *row)) break;
    }
    g->n_rows = r > GRAMMAR_MAX_FRAMES ? GRAMMAR_MAX_FRAMES + 1 : r;
    g->minlen = df_realloc(g->minlen, g->n_rows * nn * sizeof *g->minlen);
}

/* The units a match of each node may start with (fixpoint), then how many partial parses an
 * anyOf may keep open at once: the alternatives sharing a first unit all stay alive. */
#define FW ((GU_COUNT + 63) / 64)
typedef struct {
    uint64_t w[FW];
} UnitSet;

static void us_add(UnitSet *s, GUnit u) { s->w[u / 64] |= 1ull << (u % 64); }
static int us_has(const UnitSet *s, unsigned u) { return (int)(s->w[u / 64] >> (u % 64) & 1); }
static int us_or(UnitSet *a, const UnitSet *b) {
    int ch = 0;
    for (int i = 0; i < FW; i++) {
        uint64_t v = a->w[i] | b->w[i];
        ch |= v != a->w[i];
        a->w[i] = v;
    }
    return ch;
}

static void first_of_lits(const Grammar *g, uint32_t first, uint32_t n, UnitSet *s) {
    for (uint32_t i = 0; i < n; i++)
        if (g->lits[first + i].len) us_add(s, gu(g, g->lits[first + i])[0]);
}

static int first_step(const Grammar *g, uint32_t id, UnitSet *fs) {
    const GNode *n = &g->nodes[id];
    UnitSet s = fs[id];
    switch (n->kind) {
    case GK_SEQ:
        for (uint32_t i = 0; i < n->n; i++) {
            us_or(&s, &fs[g->kids[n->first + i]]);
            if (!g->nullable[g->kids[n->first + i]]) break;
        }
        break;
    case GK_CHOICE:
        for (uint32_t i = 0; i < n->n; i++) us_or(&s, &fs[g->kids[n->first + i]]);
        break;
    case GK_REPEAT:
        if (n->open.len) us_add(&s, gu(g, n->open)[0]);
        else {
            if (n->max) us_or(&s, &fs[n->item]);
            if (n->min == 0 && n->close.len) us_add(&s, gu(g, n->close)[0]);
        }
        break;
    case GK_LIT:
    case GK_SWITCH: first_of_lits(g, n->first, n->n, &s); break;
    case GK_MEMBERS:
        if (n->open.len) us_add(&s, gu(g, n->open)[0]);
        else {
            int req = 0;
            for (uint32_t i = 0; i < n->n && !req; i++) {
                const GMember *m = &g->members[n->first + i];
                if (m->key.len) us_add(&s, gu(g, m->key)[0]);
                req = m->required;
            }
            if (!req && n->close.len) us_add(&s, gu(g, n->close)[0]);
        }
        break;
    case GK_FREE:
        for (unsigned b = 0; b < 256; b++) us_add(&s, (GUnit)b);
        break;
    case GK_RAWSTR:
        for (unsigned b = 1; b < 256; b++) us_add(&s, (GUnit)b);
        break;
    case GK_JSTRING: us_add(&s, '"'); break;
    case GK_NUMBER:
        us_add(&s, '-');
        for (unsigned b = '0'; b <= '9'; b++) us_add(&s, (GUnit)b);
        break;
    case GK_COUNTER:
        for (unsigned b = '1'; b <= '9'; b++) us_add(&s, (GUnit)b);
        break;
    case GK_DFA: {
        const GDState *st = &g->dstates[n->first];
        for (uint32_t i = 0; i < st->n_edges; i++)
            for (unsigned b = g->dedges[st->edges + i].lo; b <= g->dedges[st->edges + i].hi; b++) us_add(&s, (GUnit)b);
        break;
    }
    }
    return us_or(&fs[id], &s);
}

static uint32_t fan_step(const Grammar *g, uint32_t id, const UnitSet *fs, const uint32_t *fan) {
    const GNode *n = &g->nodes[id];
    uint32_t best = 1;
    if (n->kind == GK_CHOICE) {
        for (unsigned u = 0; u < GU_COUNT; u++) {
            uint32_t sum = 0;
            for (uint32_t i = 0; i < n->n; i++)
                if (us_has(&fs[g->kids[n->first + i]], u)) sum += fan[g->kids[n->first + i]];
            if (sum > best) best = sum;
        }
        return best;
    }
    for (uint32_t i = 0; i < n_edges(g, id); i++)
        if (fan[edge_at(g, id, i)] > best) best = fan[edge_at(g, id, i)];
    return best;
}

static int check_ambiguity(const Grammar *g, const uint32_t *order, uint32_t n_order) {
    UnitSet *fs = df_calloc(g->n_nodes, sizeof *fs);
    uint32_t *fan = df_malloc(g->n_nodes * sizeof *fan);
    int rc = -1, settled = 0;
    for (int pass = 0; pass < 64 && !settled; pass++) {
        settled = 1;
        for (uint32_t o = 0; o < n_order; o++)
            if (first_step(g, order[o], fs)) settled = 0;
    }
    if (!settled) {
        rc = df_fail("grammar too intricate (first-unit analysis did not settle)");
        goto out;
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) fan[i] = 1;
    for (int pass = 0; pass < 64; pass++) {
        int changed = 0;
        for (uint32_t o = 0; o < n_order; o++) {
            uint32_t v = fan_step(g, order[o], fs, fan);
            if (v > GRAMMAR_MAX_THREADS) {
                rc = df_fail("anyOf alternatives overlap too much: %u or more partial matches could be open at once "
                             "(at most %d); make the alternatives differ in their first character",
                             v, GRAMMAR_MAX_THREADS);
                goto out;
            }
            if (v != fan[order[o]]) fan[order[o]] = v, changed = 1;
        }
        if (!changed) {
            rc = 0;
            goto out;
        }
    }
    rc = df_fail("anyOf alternatives overlap too much (their ambiguity grows with nesting)");
out:
    free(fs), free(fan);
    return rc;
}

/* Every literal's cost in vocab's tokens (ucost). Literals past a total of LITERAL_DP_UNITS
 * count a token per unit, so a hostile grammar cannot make this slow. A span is its own run of
 * units (the builders never share part of one), so its first unit tells whether it is done. */
#define LITERAL_DP_UNITS 65536

static void spell_span(Grammar *g, GSpan s, uint32_t *budget) {
    if (!s.len || g->ucost[s.off] != UINT32_MAX) return;
    if (s.len > *budget) {
        for (uint32_t k = 0; k < s.len; k++) g->ucost[s.off + k] = s.len - k;
        return;
    }
    *budget -= s.len;
    uint32_t *cost = df_malloc((s.len + 1) * sizeof *cost);
    vocab_trie_spell(g->vocab, gu(g, s), s.len, cost);
    memcpy(g->ucost + s.off, cost, s.len * sizeof *cost);
    free(cost);
}

static void literal_costs(Grammar *g) {
    size_t n = g->n_units ? g->n_units : 1;
    g->ucost = df_malloc(n * sizeof *g->ucost);
    memset(g->ucost, 0xff, n * sizeof *g->ucost);
    uint32_t budget = LITERAL_DP_UNITS;
    for (uint32_t id = 0; id < g->n_nodes; id++) {
        const GNode *nd = &g->nodes[id];
        if (nd->kind == GK_LIT || nd->kind == GK_SWITCH)
            for (uint32_t i = 0; i < nd->n; i++) spell_span(g, g->lits[nd->first + i], &budget);
        if (nd->kind == GK_MEMBERS)
            for (uint32_t i = 0; i < nd->n; i++) spell_span(g, g->members[nd->first + i].key, &budget);
        if (nd->kind == GK_REPEAT || nd->kind == GK_MEMBERS)
            spell_span(g, nd->open, &budget), spell_span(g, nd->sep, &budget), spell_span(g, nd->close, &budget);
    }
}

int grammar_finish(Grammar *g, uint32_t root, const char *what, const struct VocabTrie *vocab) {
    if (g->too_big)
        return df_fail("%s: too large to enforce (at most %d nodes, %d literals, %u characters of literal text)", what,
                       GRAMMAR_MAX_NODES, GRAMMAR_MAX_LITS, GRAMMAR_MAX_UNITS);
    if (root >= g->n_nodes || g->nodes[root].kind != GK_SEQ) return df_fail("%s: internal: the root is not a sequence", what);
    g->root = root;
    g->vocab = vocab;
    if (vocab) literal_costs(g);
    uint32_t *order = df_malloc(g->n_nodes * sizeof *order), *corder = df_malloc(g->n_nodes * sizeof *corder);
    int rc = -1;
    int64_t n_order = post_order(g, root, 0, order), n_corder = 0;
    /* CHOICE nodes reachable from the root, alternatives first; a cycle among them is refused */
    uint8_t *seen = df_calloc(g->n_nodes, 1);
    uint32_t *tmp = df_malloc(g->n_nodes * sizeof *tmp);
    for (int64_t o = 0; o < n_order && n_corder >= 0; o++) {
        if (g->nodes[order[o]].kind != GK_CHOICE || seen[order[o]]) continue;
        int64_t k = post_order(g, order[o], 1, tmp);
        if (k < 0) n_corder = -1;
        for (int64_t i = 0; i < k; i++)
            if (!seen[tmp[i]]) seen[tmp[i]] = 1, corder[n_corder++] = tmp[i];
    }
    free(seen), free(tmp);
    if (n_corder < 0) {
        df_fail("%s: an anyOf (or $ref) refers to itself without any nesting in between", what);
        goto out;
    }
    if (compute_nullable(g, order, (uint32_t)n_order) || compute_needs_ord(g, order, (uint32_t)n_order) ||
        check_ambiguity(g, order, (uint32_t)n_order)) {
        df_failctx("%s", what);
        goto out;
    }
    compute_minlen(g, order, (uint32_t)n_order, corder, (uint32_t)n_corder, 0);
    if (grammar_minlen(g, root, GRAMMAR_MAX_FRAMES) >= GRAMMAR_INF) {
        free(g->minlen);
        compute_minlen(g, order, (uint32_t)n_order, corder, (uint32_t)n_corder, 1);
        if (grammar_minlen(g, root, GRAMMAR_MAX_FRAMES) < GRAMMAR_INF)
            df_fail("%s: its shortest value is longer than %u tokens (minItems or minLength multiplied through nesting)",
                    what, GRAMMAR_INF);
        else
            df_fail("%s: no finite value satisfies it within %d levels of nesting", what, GRAMMAR_MAX_FRAMES);
        goto out;
    }
    rc = 0;
out:
    free(order), free(corder);
    return rc;
}

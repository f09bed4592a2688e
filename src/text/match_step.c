/* match_step.c - one unit through a partial match (see match_step.h).
 *
 * Frame fields by node kind:
 *   SEQ      a: next kid
 *   REPEAT   phase; a: items begun; c: offset in the open/sep/close literal
 *   LIT      a: smallest literal matching so far; b: units matched
 *   SWITCH   phase; a, b: as LIT, then a: the literal chosen
 *   JSTRING  phase; sub: UTF-8 / escape state; a: characters begun; b: \u digits so far
 *   RAWSTR   sub, a: as JSTRING
 *   NUMBER   phase; a: digits in the current part
 *   MEMBERS  phase; a: first member not yet passed; b: member chosen; c: offset in a literal
 *   COUNTER  b: digits matched
 *   DFA      a: the automaton state (an index into dstates)
 * A frame's depth and room: it may use GRAMMAR_MAX_FRAMES - depth frames, itself included. */
#include "text/match_step.h"

#include <stdio.h>
#include <string.h>

#include "util/err.h"

enum { R_OPEN, R_FIRST, R_AFTER, R_SEP, R_NEXT, R_CLOSE, R_DONE };
enum { W_LIT, W_CONT, W_DONE };
enum { S_OPEN, S_BODY, S_DONE };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_EXP, N_ESIGN, N_EDIG };
enum { M_OPEN, M_FIRST, M_AFTER, M_SEP, M_NEXT, M_KEY, M_VALUE, M_CLOSE, M_DONE };
/* string sub-states: continuation bytes owed (C1..C3), the restricted second byte after E0, ED,
 * F0, F4 (Unicode Table 3-7: no overlongs, no surrogates, nothing past U+10FFFF), a backslash,
 * and \u with 0..3 hex digits read */
enum { SB_NONE, SB_C1, SB_C2, SB_C3, SB_E0, SB_ED, SB_F0, SB_F4, SB_ESC, SB_U0, SB_U1, SB_U2, SB_U3 };

static const uint8_t sub_pending[] = {0, 1, 2, 3, 2, 2, 3, 3, 1, 4, 3, 2, 1};

uint32_t arena_push(Arena *a, const Frame *f) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->fr = df_realloc(a->fr, (size_t)a->cap * sizeof *a->fr);
    }
    a->fr[a->n] = *f;
    return a->n++;
}

static const GNode *node_of(const Arena *a, const Frame *f) { return &a->g->nodes[f->node]; }
static uint32_t room_below(const Frame *f) { return GRAMMAR_MAX_FRAMES - f->depth - 1u; }
static uint32_t minlen_at(const Grammar *g, uint32_t node, const Frame *parent) {
    return grammar_minlen(g, node, room_below(parent));
}
static GSpan lit_at(const Grammar *g, const GNode *n, uint32_t i) { return g->lits[n->first + i]; }

/* ------------------------------------------------------------------ threads */

static int chains_equal(const Arena *a, uint32_t x, uint32_t y) {
    while (x != y) {
        if (!FR_REAL(x) || !FR_REAL(y)) return 0;
        const Frame *p = &a->fr[x], *q = &a->fr[y];
        if (p->node != q->node || p->ord != q->ord || p->a != q->a || p->b != q->b || p->c != q->c ||
            p->depth != q->depth || p->phase != q->phase || p->sub != q->sub)
            return 0;
        x = p->parent, y = q->parent;
    }
    return 1;
}

void threads_add(const Arena *a, Threads *ts, uint32_t t) {
    for (int i = 0; i < ts->n; i++)
        if (chains_equal(a, ts->t[i], t)) return;
    if (ts->n == MATCH_MAX_THREADS) {
        ts->overflow = 1;
        return;
    }
    ts->t[ts->n++] = t;
}

/* ------------------------------------------------------------------ frame predicates */

/* Next index after the first required member at or after i (the members a match may name next
 * are [i, that)), or n when none is required. */
static uint32_t members_reach(const Grammar *g, const GNode *n, uint32_t i) {
    while (i < n->n && !g->members[n->first + i].required) i++;
    return i < n->n ? i + 1 : n->n;
}

static int members_required_left(const Grammar *g, const GNode *n, uint32_t i) {
    for (; i < n->n; i++)
        if (g->members[n->first + i].required) return 1;
    return 0;
}

static int lit_extends(const Grammar *g, const GNode *n, uint32_t c, uint32_t off) {
    if (c + 1 >= n->n) return 0;
    GSpan x = lit_at(g, n, c), y = lit_at(g, n, c + 1);
    return y.len > off && !memcmp(gu(g, x), gu(g, y), off * sizeof(GUnit));
}

static int accepting(const Arena *a, const Frame *f) {
    const Grammar *g = a->g;
    const GNode *n = node_of(a, f);
    switch (n->kind) {
    case GK_SEQ:
        for (uint32_t k = f->a; k < n->n; k++)
            if (!g->nullable[g->kids[n->first + k]]) return 0;
        return 1;
    case GK_REPEAT: return (f->phase == R_FIRST || f->phase == R_AFTER) && !n->close.len && f->a >= n->min;
    case GK_LIT: return lit_at(g, n, f->a).len == f->b;
    case GK_SWITCH: return f->phase == W_CONT && g->nullable[g->kids[n->item + f->a]];
    case GK_FREE: return 1;
    case GK_JSTRING: return f->phase == S_DONE;
    case GK_RAWSTR: return f->sub == SB_NONE && f->a >= n->min;
    case GK_NUMBER: return f->phase == N_ZERO || f->phase == N_INT || f->phase == N_FRAC || f->phase == N_EDIG;
    case GK_MEMBERS:
        return (f->phase == M_FIRST || f->phase == M_AFTER) && !n->close.len && !members_required_left(g, n, f->a);
    case GK_COUNTER: return f->b == grammar_digits(f->ord);
    case GK_DFA: return g->dstates[f->a].accept;
    }
    return 0;
}

/* Accepting and unable to take anything more: popped at once. */
static int finished(const Arena *a, const Frame *f) {
    const Grammar *g = a->g;
    const GNode *n = node_of(a, f);
    switch (n->kind) {
    case GK_SEQ: return f->a == n->n;
    case GK_REPEAT:
        return f->phase == R_DONE ||
               ((f->phase == R_FIRST || f->phase == R_AFTER) && !n->close.len && f->a >= n->min && f->a >= n->max);
    case GK_LIT: return accepting(a, f) && !lit_extends(g, n, f->a, f->b);
    case GK_SWITCH: return f->phase == W_DONE;
    case GK_JSTRING: return f->phase == S_DONE;
    case GK_NUMBER:
        if (n->integer) return f->phase == N_ZERO || (f->phase == N_INT && f->a == NUM_MAX_INT_DIGITS);
        return f->phase == N_EDIG && f->a == NUM_MAX_EXP_DIGITS;
    case GK_MEMBERS: return f->phase == M_DONE || (f->phase == M_AFTER && !n->close.len && f->a == n->n);
    case GK_COUNTER: return accepting(a, f);
    case GK_DFA: return g->dstates[f->a].accept && !g->dstates[f->a].n_edges;
    default: return 0; /* FREE, RAWSTR: end only before a marker */
    }
}

/* Kinds whose text runs until a marker: a byte never ends them. */
static int ends_before_markers_only(const GNode *n) { return n->kind == GK_FREE || n->kind == GK_RAWSTR; }

/* ------------------------------------------------------------------ pushing and emitting */

static void settle(Arena *a, uint32_t t, Threads *out) {
    while (FR_REAL(t) && finished(a, &a->fr[t])) t = a->fr[t].parent;
    if (t == FR_DETACHED) out->detached_pop = 1;
    else threads_add(a, out, t);
}

/* Records f as a new frame (or reuses self when f is unchanged) and settles it into out. */
static void emit(Arena *a, const Frame *f, uint32_t self, Threads *out) {
    if (FR_REAL(self) && !memcmp(&a->fr[self], f, sizeof *f)) {
        threads_add(a, out, self);
        return;
    }
    settle(a, arena_push(a, f), out);
}

static void consume(Arena *a, const Frame *f, uint32_t self, GUnit u, Threads *out);

/* Starts a match of node as the child of frame `parent` (already recorded in its post-child
 * state) with its first unit u. CHOICE alternatives each start their own thread. */
static void enter(Arena *a, uint32_t node, uint32_t parent, GUnit u, Threads *out) {
    const Grammar *g = a->g;
    const GNode *n = &g->nodes[node];
    const Frame *p = &a->fr[parent];
    if (n->kind == GK_CHOICE) {
        for (uint32_t i = 0; i < n->n; i++) enter(a, g->kids[n->first + i], parent, u, out);
        return;
    }
    if (p->depth + 1u >= GRAMMAR_MAX_FRAMES || minlen_at(g, node, p) >= GRAMMAR_INF) return;
    const GNode *pn = &g->nodes[p->node];
    Frame f = {.parent = parent, .node = node, .depth = (uint16_t)(p->depth + 1)};
    if (g->needs_ord[node]) f.ord = pn->kind == GK_REPEAT && pn->numbered ? p->a : p->ord;
    if (n->kind == GK_REPEAT) f.phase = n->open.len ? R_OPEN : R_FIRST;
    else if (n->kind == GK_MEMBERS) f.phase = n->open.len ? M_OPEN : M_FIRST;
    else if (n->kind == GK_DFA) f.a = n->first;
    consume(a, &f, FR_DONE, u, out);
}

/* Records parent (its state once the child is done) and enters child under it. */
static void push(Arena *a, const Frame *parent, uint32_t child, GUnit u, Threads *out) {
    enter(a, child, arena_push(a, parent), u, out);
}

uint32_t match_start(Arena *a) {
    Frame f = {.parent = FR_DONE, .node = a->g->root};
    return arena_push(a, &f);
}

/* ------------------------------------------------------------------ literals */

/* Compares the first off units of literal x with those of y, then x[off] with u. */
static int cmp_prefix_then(const Grammar *g, GSpan x, GSpan y, uint32_t off, GUnit u) {
    uint32_t m = x.len < off ? x.len : off;
    for (uint32_t i = 0; i < m; i++)
        if (gu(g, x)[i] != gu(g, y)[i]) return gu(g, x)[i] < gu(g, y)[i] ? -1 : 1;
    if (x.len <= off) return -1;
    return gu(g, x)[off] < u ? -1 : gu(g, x)[off] > u;
}

/* The smallest literal index >= c (of a sorted set) that shares literal c's first off units and
 * has u next, or -1. Binary search: the literals that share a prefix are contiguous. */
static int64_t lit_next(const Grammar *g, const GNode *n, uint32_t c, uint32_t off, GUnit u) {
    GSpan ref = lit_at(g, n, c);
    uint32_t lo = c, hi = n->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cmp_prefix_then(g, lit_at(g, n, mid), ref, off, u) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n->n && !cmp_prefix_then(g, lit_at(g, n, lo), ref, off, u) ? (int64_t)lo : -1;
}

static int shares_prefix(const Grammar *g, GSpan x, GSpan y, uint32_t off) {
    return x.len >= off && y.len >= off && !memcmp(gu(g, x), gu(g, y), off * sizeof(GUnit));
}

/* Extra units a needs_ord continuation takes for an index of more than one digit (the length
 * tables count a COUNTER as one digit). */
static uint32_t ord_extra(const Grammar *g, uint32_t node, uint32_t ord) {
    return g->needs_ord[node] && ord ? grammar_digits(ord) - 1 : 0;
}

/* SWITCH: the literal chosen by u after literal c's first off units, skipping literals whose
 * continuation cannot finish in the room left; -1 if none. */
static int64_t switch_next(const Grammar *g, const GNode *n, const Frame *f, GUnit u) {
    GSpan ref = lit_at(g, n, f->a);
    for (uint32_t k = f->a; k < n->n && shares_prefix(g, lit_at(g, n, k), ref, f->b); k++) {
        GSpan l = lit_at(g, n, k);
        if (l.len > f->b && gu(g, l)[f->b] == u && minlen_at(g, g->kids[n->item + k], f) < GRAMMAR_INF) return k;
    }
    return -1;
}

/* ------------------------------------------------------------------ strings */

static int is_hex(GUnit u) { return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'f') || (u >= 'A' && u <= 'F'); }
static uint32_t hex_val(GUnit u) { return u <= '9' ? (uint32_t)u - '0' : ((uint32_t)u | 0x20) - 'a' + 10u; }

/* The sub-state after a lead byte, or -1 for a byte that cannot start a character. */
static int lead_state(GUnit u) {
    if (u >= 0xC2 && u <= 0xDF) return SB_C1;
    if (u == 0xE0) return SB_E0;
    if (u == 0xED) return SB_ED;
    if (u >= 0xE1 && u <= 0xEF) return SB_C2;
    if (u == 0xF0) return SB_F0;
    if (u >= 0xF1 && u <= 0xF3) return SB_C3;
    if (u == 0xF4) return SB_F4;
    return -1;
}

/* One byte of string content (json: inside quotes, with escapes; else raw text). Returns 0 and
 * updates f, or -1. */
static int string_byte(const GNode *n, Frame *f, GUnit u, int json, int unbounded) {
    if (GU_IS_MARKER(u)) return -1;
    switch (f->sub) {
    case SB_NONE: {
        if (json && u == '"') {
            if (f->a < n->min) return -1;
            f->phase = S_DONE;
            return 0;
        }
        if (f->a >= n->max && !unbounded) return -1;
        int next = SB_NONE;
        if (json && u == '\\') next = SB_ESC;
        else if (u < 0x20 && (json || u == 0)) return -1;
        else if (u >= 0x80 && (next = lead_state(u)) < 0) return -1;
        f->a++, f->sub = (uint8_t)next;
        return 0;
    }
    case SB_C1:
    case SB_C2:
    case SB_C3:
        if (u < 0x80 || u > 0xBF) return -1;
        f->sub--;
        return 0;
    case SB_E0: if (u < 0xA0 || u > 0xBF) return -1; f->sub = SB_C1; return 0;
    case SB_ED: if (u < 0x80 || u > 0x9F) return -1; f->sub = SB_C1; return 0;
    case SB_F0: if (u < 0x90 || u > 0xBF) return -1; f->sub = SB_C2; return 0;
    case SB_F4: if (u < 0x80 || u > 0x8F) return -1; f->sub = SB_C2; return 0;
    case SB_ESC:
        if (u == 'u') f->sub = SB_U0, f->b = 0;
        else if (strchr("\"\\/bfnrt", u) && u) f->sub = SB_NONE;
        else return -1;
        return 0;
    default: /* SB_U0..SB_U3: no surrogate halves (D800-DFFF) and no \u0000 */
        if (!is_hex(u)) return -1;
        f->b = f->b * 16 + hex_val(u);
        if (f->sub == SB_U1 && f->b >= 0xD8 && f->b <= 0xDF) return -1;
        if (f->sub == SB_U3) {
            if (f->b == 0) return -1;
            f->sub = SB_NONE;
        } else
            f->sub++;
        return 0;
    }
}

/* ------------------------------------------------------------------ numbers */

static int is_digit(GUnit u) { return u >= '0' && u <= '9'; }

static int number_unit(const GNode *n, Frame *f, GUnit u) {
    int exp = !n->integer && (u == 'e' || u == 'E');
    switch (f->phase) {
    case N_START:
        if (u == '-') return f->phase = N_MINUS, 0;
        /* fall through */
    case N_MINUS:
        if (u == '0') return f->phase = N_ZERO, 0;
        if (is_digit(u)) return f->phase = N_INT, f->a = 1, 0;
        return -1;
    case N_ZERO:
    case N_INT:
        if (f->phase == N_INT && is_digit(u) && f->a < NUM_MAX_INT_DIGITS) return f->a++, 0;
        if (!n->integer && u == '.') return f->phase = N_DOT, 0;
        if (exp) return f->phase = N_EXP, 0;
        return -1;
    case N_DOT:
        if (is_digit(u)) return f->phase = N_FRAC, f->a = 1, 0;
        return -1;
    case N_FRAC:
        if (is_digit(u) && f->a < NUM_MAX_FRAC_DIGITS) return f->a++, 0;
        if (exp) return f->phase = N_EXP, 0;
        return -1;
    case N_EXP:
        if (u == '+' || u == '-') return f->phase = N_ESIGN, 0;
        /* fall through */
    case N_ESIGN:
        if (is_digit(u)) return f->phase = N_EDIG, f->a = 1, 0;
        return -1;
    case N_EDIG:
        if (is_digit(u) && f->a < NUM_MAX_EXP_DIGITS) return f->a++, 0;
        return -1;
    }
    return -1;
}

/* ------------------------------------------------------------------ repeats and members */

static void repeat_push_item(Arena *a, const GNode *n, const Frame *f, GUnit u, Threads *out) {
    Frame p = *f;
    p.a++, p.phase = R_AFTER, p.c = 0;
    push(a, &p, n->item, u, out);
}

/* Matches u against unit f.c of literal lit (REPEAT and MEMBERS keep literal offsets in c),
 * starting phase `at` if f is not in it yet; after the last unit the frame is in phase `done`. */
static void lit_unit(Arena *a, Frame f, GSpan lit, uint8_t at, uint8_t done, GUnit u, Threads *out) {
    if (f.phase != at) f.phase = at, f.c = 0;
    if (f.c >= lit.len || gu(a->g, lit)[f.c] != u) return;
    if (++f.c == lit.len) f.phase = done, f.c = 0;
    emit(a, &f, FR_DONE, out);
}

static void consume_repeat(Arena *a, const GNode *n, const Frame *f, GUnit u, Threads *out) {
    int item_ok = f->a < n->max && minlen_at(a->g, n->item, f) < GRAMMAR_INF;
    switch (f->phase) {
    case R_OPEN: lit_unit(a, *f, n->open, R_OPEN, R_FIRST, u, out); return;
    case R_SEP: lit_unit(a, *f, n->sep, R_SEP, R_NEXT, u, out); return;
    case R_CLOSE: lit_unit(a, *f, n->close, R_CLOSE, R_DONE, u, out); return;
    case R_NEXT: repeat_push_item(a, n, f, u, out); return;
    case R_FIRST:
    case R_AFTER:
        if (item_ok && (f->phase == R_FIRST || !n->sep.len)) repeat_push_item(a, n, f, u, out);
        else if (item_ok) lit_unit(a, *f, n->sep, R_SEP, R_NEXT, u, out);
        if (f->a >= n->min && n->close.len) lit_unit(a, *f, n->close, R_CLOSE, R_DONE, u, out);
        return;
    }
}

/* MEMBERS: may member k be named next (its value fits in the room left)? */
static int member_ok(const Grammar *g, const GNode *n, const Frame *f, uint32_t k) {
    return minlen_at(g, g->members[n->first + k].value, f) < GRAMMAR_INF;
}

/* The smallest member in reach whose key shares member b's first off units and has u next. */
static int64_t member_next(const Grammar *g, const GNode *n, const Frame *f, uint32_t b, uint32_t off, GUnit u) {
    uint32_t reach = members_reach(g, n, f->a);
    if (b >= reach) return -1; /* (no member b: an object with no members has no array to index) */
    GSpan ref = g->members[n->first + b].key;
    for (uint32_t k = b; k < reach; k++) {
        GSpan key = g->members[n->first + k].key;
        if (key.len > off && gu(g, key)[off] == u && shares_prefix(g, key, ref, off) && member_ok(g, n, f, k)) return k;
    }
    return -1;
}

static void member_key_unit(Arena *a, const GNode *n, Frame f, uint32_t from, uint32_t off, GUnit u, Threads *out) {
    int64_t k = member_next(a->g, n, &f, from, off, u);
    if (k < 0) return;
    f.phase = M_KEY, f.b = (uint32_t)k, f.c = off + 1;
    if (f.c == a->g->members[n->first + k].key.len) f.phase = M_VALUE, f.c = 0;
    emit(a, &f, FR_DONE, out);
}

static int members_any_next(const Grammar *g, const GNode *n, const Frame *f) {
    for (uint32_t k = f->a; k < members_reach(g, n, f->a); k++)
        if (member_ok(g, n, f, k)) return 1;
    return 0;
}

static void consume_members(Arena *a, const GNode *n, const Frame *f, GUnit u, Threads *out) {
    const Grammar *g = a->g;
    switch (f->phase) {
    case M_OPEN: lit_unit(a, *f, n->open, M_OPEN, M_FIRST, u, out); return;
    case M_SEP: lit_unit(a, *f, n->sep, M_SEP, M_NEXT, u, out); return;
    case M_CLOSE: lit_unit(a, *f, n->close, M_CLOSE, M_DONE, u, out); return;
    case M_KEY: member_key_unit(a, n, *f, f->b, f->c, u, out); return;
    case M_VALUE: {
        Frame p = *f;
        p.a = f->b + 1, p.phase = M_AFTER, p.b = p.c = 0;
        push(a, &p, g->members[n->first + f->b].value, u, out);
        return;
    }
    case M_NEXT: member_key_unit(a, n, *f, f->a, 0, u, out); return;
    case M_FIRST:
    case M_AFTER:
        if (f->phase == M_FIRST || !n->sep.len) member_key_unit(a, n, *f, f->a, 0, u, out);
        else if (members_any_next(g, n, f)) lit_unit(a, *f, n->sep, M_SEP, M_NEXT, u, out);
        if (!members_required_left(g, n, f->a) && n->close.len) lit_unit(a, *f, n->close, M_CLOSE, M_DONE, u, out);
        return;
    }
}

/* ------------------------------------------------------------------ automata */

/* The state after byte u from state `from`; 0 when u has no edge there. */
static int dfa_next(const Grammar *g, uint32_t from, GUnit u, uint32_t *to) {
    const GDState *st = &g->dstates[from];
    uint32_t lo = 0, hi = st->n_edges;
    if (GU_IS_MARKER(u)) return 0;
    while (lo < hi) { /* the first edge that does not end below u */
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->dedges[st->edges + mid].hi < u) lo = mid + 1;
        else hi = mid;
    }
    if (lo == st->n_edges || g->dedges[st->edges + lo].lo > u) return 0;
    *to = g->dedges[st->edges + lo].to;
    return 1;
}

/* ------------------------------------------------------------------ one unit */

static void consume(Arena *a, const Frame *f, uint32_t self, GUnit u, Threads *out) {
    const Grammar *g = a->g;
    const GNode *n = node_of(a, f);
    Frame s = *f;
    switch (n->kind) {
    case GK_SEQ:
        for (uint32_t k = f->a; k < n->n; k++) {
            uint32_t kid = g->kids[n->first + k];
            s.a = k + 1;
            push(a, &s, kid, u, out);
            if (!g->nullable[kid]) break;
        }
        return;
    case GK_REPEAT: consume_repeat(a, n, f, u, out); return;
    case GK_LIT: {
        int64_t k = lit_next(g, n, f->a, f->b, u);
        if (k < 0) return;
        s.a = (uint32_t)k, s.b = f->b + 1;
        emit(a, &s, self, out);
        return;
    }
    case GK_SWITCH:
        if (f->phase == W_LIT) {
            int64_t k = switch_next(g, n, f, u);
            if (k < 0) return;
            s.a = (uint32_t)k, s.b = f->b + 1;
            if (s.b == lit_at(g, n, s.a).len) s.phase = W_CONT, s.b = 0;
            emit(a, &s, self, out);
        } else if (f->phase == W_CONT) {
            s.phase = W_DONE;
            push(a, &s, g->kids[n->item + f->a], u, out);
        }
        return;
    case GK_FREE:
        if (!GU_IS_MARKER(u)) emit(a, &s, self, out);
        return;
    case GK_JSTRING:
        if (f->phase == S_OPEN) {
            if (u != '"') return;
            s.phase = S_BODY;
        } else if (string_byte(n, &s, u, 1, a->unbounded_strings))
            return;
        emit(a, &s, self, out);
        return;
    case GK_RAWSTR:
        if (!string_byte(n, &s, u, 0, a->unbounded_strings)) emit(a, &s, self, out);
        return;
    case GK_NUMBER:
        if (!number_unit(n, &s, u)) emit(a, &s, self, out);
        return;
    case GK_MEMBERS: consume_members(a, n, f, u, out); return;
    case GK_DFA:
        if (dfa_next(g, f->a, u, &s.a)) emit(a, &s, self, out);
        return;
    case GK_COUNTER: {
        char d[12];
        int len = snprintf(d, sizeof d, "%u", f->ord);
        if (f->b < (uint32_t)len && (GUnit)(unsigned char)d[f->b] == u) s.b++, emit(a, &s, self, out);
        return;
    }
    }
}

void match_step(Arena *a, uint32_t t, GUnit u, Threads *out) {
    if (!FR_REAL(t)) return;
    Frame f = a->fr[t];
    consume(a, &f, t, u, out);
    if (!accepting(a, &f) || (!GU_IS_MARKER(u) && ends_before_markers_only(node_of(a, &f)))) return;
    uint32_t p = f.parent; /* the frame may end here: the unit then belongs to what comes after it */
    while (FR_REAL(p) && finished(a, &a->fr[p])) p = a->fr[p].parent;
    if (p == FR_DETACHED) out->detached_pop = 1;
    else match_step(a, p, u, out);
}

/* ------------------------------------------------------------------ remaining length */

static uint32_t sat(uint64_t v) { return v >= GRAMMAR_INF ? GRAMMAR_INF : (uint32_t)v; }

/* REPEAT: tokens to finish once `count` items are done; first: no item written yet. */
static uint64_t repeat_after(const Grammar *g, const GNode *n, const Frame *f, uint32_t count, int first) {
    uint64_t k = n->min > count ? n->min - count : 0, item = minlen_at(g, n->item, f);
    uint64_t v = span_cost(g, n->close, 0) + k * item + (k ? (first ? k - 1 : k) * span_cost(g, n->sep, 0) : 0);
    for (uint64_t j = 1; j <= k && n->numbered; j++) v += grammar_digits((uint32_t)(count + j)) - 1;
    return v;
}

static uint64_t repeat_rem(const Grammar *g, const GNode *n, const Frame *f) {
    uint64_t item = minlen_at(g, n->item, f) + (n->numbered ? grammar_digits(f->a + 1) - 1 : 0);
    switch (f->phase) {
    case R_OPEN: return span_cost(g, n->open, f->c) + repeat_after(g, n, f, 0, 1);
    case R_FIRST: return repeat_after(g, n, f, f->a, 1);
    case R_AFTER: return repeat_after(g, n, f, f->a, 0);
    case R_SEP: return span_cost(g, n->sep, f->c) + item + repeat_after(g, n, f, f->a + 1, 0);
    case R_NEXT: return item + repeat_after(g, n, f, f->a + 1, 0);
    case R_CLOSE: return span_cost(g, n->close, f->c);
    default: return 0;
    }
}

/* MEMBERS: tokens to finish once members before i are passed; first: no member written yet. */
static uint64_t members_after(const Grammar *g, const GNode *n, const Frame *f, uint32_t i, int first) {
    uint64_t v = span_cost(g, n->close, 0), req = 0;
    for (uint32_t k = i; k < n->n; k++) {
        const GMember *m = &g->members[n->first + k];
        if (m->required) v += span_cost(g, m->key, 0) + (uint64_t)minlen_at(g, m->value, f), req++;
    }
    return v + (req ? (first ? req - 1 : req) * span_cost(g, n->sep, 0) : 0);
}

/* Fewest tokens for one more member (whose key has `off` units matched, sharing member b's
 * prefix) and everything after it. */
static uint64_t members_one_more(const Grammar *g, const GNode *n, const Frame *f, uint32_t b, uint32_t off) {
    uint64_t best = GRAMMAR_INF;
    const uint32_t reach = members_reach(g, n, f->a);
    if (b >= reach) return best; /* (no member b: see member_next) */
    GSpan ref = g->members[n->first + b].key;
    for (uint32_t k = b; k < reach; k++) {
        const GMember *m = &g->members[n->first + k];
        if (!shares_prefix(g, m->key, ref, off) || !member_ok(g, n, f, k)) continue;
        uint64_t c = span_cost(g, m->key, off) + (uint64_t)minlen_at(g, m->value, f) + members_after(g, n, f, k + 1, 0);
        if (c < best) best = c;
    }
    return best;
}

static uint64_t members_rem(const Grammar *g, const GNode *n, const Frame *f) {
    switch (f->phase) {
    case M_OPEN: return span_cost(g, n->open, f->c) + members_after(g, n, f, 0, 1);
    case M_FIRST: return members_after(g, n, f, f->a, 1);
    case M_AFTER: return members_after(g, n, f, f->a, 0);
    case M_SEP: return span_cost(g, n->sep, f->c) + members_one_more(g, n, f, f->a, 0);
    case M_NEXT: return members_one_more(g, n, f, f->a, 0);
    case M_KEY: return members_one_more(g, n, f, f->b, f->c);
    case M_VALUE: return minlen_at(g, g->members[n->first + f->b].value, f) + members_after(g, n, f, f->b + 1, 0);
    case M_CLOSE: return span_cost(g, n->close, f->c);
    default: return 0;
    }
}

static uint64_t lits_rem(const Grammar *g, const GNode *n, const Frame *f, int with_cont) {
    uint64_t best = GRAMMAR_INF;
    GSpan ref = lit_at(g, n, f->a);
    for (uint32_t k = f->a; k < n->n && shares_prefix(g, lit_at(g, n, k), ref, f->b); k++) {
        uint64_t c = span_cost(g, lit_at(g, n, k), f->b);
        if (with_cont) {
            uint32_t cont = g->kids[n->item + k];
            c += minlen_at(g, cont, f) + ord_extra(g, cont, f->ord);
        }
        if (c < best) best = c;
    }
    return best;
}

static uint64_t number_rem(const Frame *f) {
    switch (f->phase) {
    case N_START:
    case N_MINUS:
    case N_DOT:
    case N_EXP:
    case N_ESIGN: return 1;
    default: return 0;
    }
}

uint32_t frame_rem(const Grammar *g, const Frame *f) {
    const GNode *n = &g->nodes[f->node];
    uint64_t v = 0;
    switch (n->kind) {
    case GK_SEQ:
        for (uint32_t k = f->a; k < n->n; k++) {
            uint32_t kid = g->kids[n->first + k];
            v += g->nodes[kid].kind == GK_COUNTER ? grammar_digits(f->ord) : minlen_at(g, kid, f);
        }
        break;
    case GK_REPEAT: v = repeat_rem(g, n, f); break;
    case GK_LIT: v = lits_rem(g, n, f, 0); break;
    case GK_SWITCH:
        if (f->phase == W_LIT) v = lits_rem(g, n, f, 1);
        else if (f->phase == W_CONT) {
            uint32_t cont = g->kids[n->item + f->a];
            v = minlen_at(g, cont, f) + ord_extra(g, cont, f->ord);
        }
        break;
    case GK_JSTRING:
        if (f->phase == S_OPEN) v = 2 + (uint64_t)n->min;
        else if (f->phase == S_BODY) v = (n->min > f->a ? n->min - f->a : 0) + 1 + sub_pending[f->sub];
        break;
    case GK_RAWSTR: v = (n->min > f->a ? n->min - f->a : 0) + sub_pending[f->sub]; break;
    case GK_NUMBER: v = number_rem(f); break;
    case GK_MEMBERS: v = members_rem(g, n, f); break;
    case GK_COUNTER: v = grammar_digits(f->ord) - f->b; break;
    case GK_DFA: v = g->dstates[f->a].dist; break;
    default: break;
    }
    return sat(v);
}

uint32_t match_remaining(const Arena *a, uint32_t t) {
    uint64_t v = 0;
    for (; FR_REAL(t); t = a->fr[t].parent) v += frame_rem(a->g, &a->fr[t]);
    return sat(v);
}

/* ------------------------------------------------------------------ cache keys */

static uint32_t clip(uint64_t v, uint32_t cap) { return v > cap ? cap : (uint32_t)v; }

void frame_cache_key(const Grammar *g, const Frame *f, uint32_t max_units, FrameKey *key) {
    const GNode *n = &g->nodes[f->node];
    memset(key, 0, sizeof *key);
    *key = (FrameKey){f->node, f->ord, f->a, f->b, f->c, 0, f->depth, f->phase, f->sub};
    int counted = frame_is_string(g, f) || (n->kind == GK_REPEAT && !n->numbered);
    if (counted) { /* what one token can see of a count: how far below min and below max it is */
        uint32_t cap = max_units + 1;
        key->a = clip(n->min > f->a ? n->min - f->a : 0, cap);
        key->d = frame_is_string(g, f) ? 0 : clip(n->max > f->a ? (uint64_t)n->max - f->a : 0, cap);
    }
    int pushes = n->kind == GK_SEQ || n->kind == GK_REPEAT || n->kind == GK_SWITCH || n->kind == GK_MEMBERS;
    if (!pushes) key->depth = 0; /* only what a frame pushes depends on its depth */
}

int frame_is_string(const Grammar *g, const Frame *f) {
    uint8_t k = g->nodes[f->node].kind;
    return k == GK_RAWSTR || (k == GK_JSTRING && f->phase == S_BODY);
}

uint32_t frame_string_room(const Grammar *g, const Frame *f) {
    const GNode *n = &g->nodes[f->node];
    return n->max == UINT32_MAX ? UINT32_MAX : n->max > f->a ? n->max - f->a : 0;
}

/* regex.c - parsing the supported ECMAScript subset into a syntax tree, then Thompson's
 * construction into an NFA (see regex.h). */
#include "text/regex.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define INF_REPEAT UINT32_MAX

typedef struct {
    uint32_t lo, hi;
} Range;

typedef enum { RX_SET, RX_CAT, RX_ALT, RX_REP } RxKind;

typedef struct {
    uint8_t kind;
    uint32_t min, max;   /* RX_REP */
    uint32_t first, n;   /* RX_SET: ranges[first..+n); RX_CAT, RX_ALT: kids[first..+n); RX_REP: first is the node */
} RxNode;

typedef struct {
    const uint8_t *text;
    size_t len, at;      /* at: byte offset of the next code point */
    RxNode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *kids;
    uint32_t n_kids, cap_kids;
    Range *ranges;
    uint32_t n_ranges, cap_ranges;
    int depth;
} Parser;

/* ------------------------------------------------------------------ errors and input */

/* Character position (1-based, in code points) of byte offset at. */
static size_t char_pos(const Parser *p, size_t at) {
    size_t n = 1;
    for (size_t i = 0; i < at && i < p->len; i++) n += (p->text[i] & 0xC0) != 0x80;
    return n;
}

static int fail_at(const Parser *p, size_t at, const char *what) {
    return df_fail("%s (at character %zu)", what, char_pos(p, at));
}

static int at_end(const Parser *p) { return p->at >= p->len; }
static int peek(const Parser *p) { return at_end(p) ? -1 : p->text[p->at]; }
static int peek2(const Parser *p) { return p->at + 1 >= p->len ? -1 : p->text[p->at + 1]; }

/* The next code point (the text is UTF-8: the caller's JSON string). */
static uint32_t next_cp(Parser *p) {
    const uint8_t *s = p->text + p->at;
    size_t left = p->len - p->at;
    uint32_t c = s[0];
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n > left) n = left;
    if (n > 1) c &= 0x3F >> (n - 1);
    for (size_t i = 1; i < n; i++) c = c << 6 | (s[i] & 0x3F);
    p->at += n;
    return c;
}

/* ------------------------------------------------------------------ sets of code points */

typedef struct {
    Range *v;
    uint32_t n, cap;
} Set;

static void set_add(Set *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) s->cap = s->cap ? 2 * s->cap : 16, s->v = df_realloc(s->v, s->cap * sizeof *s->v);
    s->v[s->n++] = (Range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, and inside the alphabet (no NUL, no surrogates). */
static void set_normalise(Set *s) {
    if (s->n) qsort(s->v, s->n, sizeof *s->v, cmp_range);
    Set out = {0};
    for (uint32_t i = 0; i < s->n; i++) {
        Range r = s->v[i];
        if (out.n && r.lo <= out.v[out.n - 1].hi + 1) {
            if (r.hi > out.v[out.n - 1].hi) out.v[out.n - 1].hi = r.hi;
        } else
            set_add(&out, r.lo, r.hi);
    }
    free(s->v);
    *s = (Set){0};
    for (uint32_t i = 0; i < out.n; i++) { /* clipped to 1..0xD7FF and 0xE000..0x10FFFF */
        Range r = out.v[i];
        if (r.lo == 0) r.lo = 1;
        if (r.lo <= 0xD7FF && r.lo <= r.hi) set_add(s, r.lo, r.hi < 0xD7FF ? r.hi : 0xD7FF);
        if (r.hi >= 0xE000 && r.lo <= r.hi) set_add(s, r.lo > 0xE000 ? r.lo : 0xE000, r.hi);
    }
    free(out.v);
}

/* Every code point of the alphabet that s (normalised) does not hold. */
static void set_complement(Set *s) {
    Set out = {0};
    uint32_t next = 1;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->v[i].lo > next) set_add(&out, next, s->v[i].lo - 1);
        next = s->v[i].hi + 1;
    }
    if (next <= AUTO_MAX_CODE) set_add(&out, next, AUTO_MAX_CODE);
    free(s->v);
    *s = out;
    set_normalise(s);
}

/* \d \w \s (upper case: their complements), added to s. */
static void set_add_class(Set *s, int letter) {
    Set c = {0};
    switch (letter | 0x20) {
    case 'd': set_add(&c, '0', '9'); break;
    case 'w':
        set_add(&c, '0', '9'), set_add(&c, 'A', 'Z'), set_add(&c, '_', '_'), set_add(&c, 'a', 'z');
        break;
    default: /* s: ECMAScript's WhiteSpace and LineTerminator */
        set_add(&c, '\t', '\r'), set_add(&c, ' ', ' '), set_add(&c, 0xA0, 0xA0), set_add(&c, 0x1680, 0x1680);
        set_add(&c, 0x2000, 0x200A), set_add(&c, 0x2028, 0x2029), set_add(&c, 0x202F, 0x202F);
        set_add(&c, 0x205F, 0x205F), set_add(&c, 0x3000, 0x3000), set_add(&c, 0xFEFF, 0xFEFF);
        break;
    }
    set_normalise(&c);
    if (letter >= 'A' && letter <= 'Z') set_complement(&c);
    for (uint32_t i = 0; i < c.n; i++) set_add(s, c.v[i].lo, c.v[i].hi);
    free(c.v);
}

/* ------------------------------------------------------------------ syntax tree */

static uint32_t add_node(Parser *p, RxNode n) {
    if (p->n_nodes == p->cap_nodes)
        p->cap_nodes = p->cap_nodes ? 2 * p->cap_nodes : 64, p->nodes = df_realloc(p->nodes, p->cap_nodes * sizeof *p->nodes);
    p->nodes[p->n_nodes] = n;
    return p->n_nodes++;
}

static uint32_t set_node(Parser *p, Set *s) {
    set_normalise(s);
    uint32_t first = p->n_ranges;
    for (uint32_t i = 0; i < s->n; i++) {
        if (p->n_ranges == p->cap_ranges)
            p->cap_ranges = p->cap_ranges ? 2 * p->cap_ranges : 64, p->ranges = df_realloc(p->ranges, p->cap_ranges * sizeof *p->ranges);
        p->ranges[p->n_ranges++] = s->v[i];
    }
    free(s->v);
    *s = (Set){0};
    return add_node(p, (RxNode){.kind = RX_SET, .first = first, .n = p->n_ranges - first});
}

static uint32_t char_node(Parser *p, uint32_t c) {
    Set s = {0};
    set_add(&s, c, c);
    return set_node(p, &s);
}

/* A CAT or ALT of kids[0..n) (the list is copied). */
static uint32_t list_node(Parser *p, RxKind kind, const uint32_t *kids, uint32_t n) {
    if (n == 1) return kids[0];
    if (p->n_kids + n > p->cap_kids) {
        while (p->n_kids + n > p->cap_kids) p->cap_kids = p->cap_kids ? 2 * p->cap_kids : 64;
        p->kids = df_realloc(p->kids, p->cap_kids * sizeof *p->kids);
    }
    uint32_t first = p->n_kids;
    if (n) memcpy(p->kids + first, kids, n * sizeof *kids);
    p->n_kids += n;
    return add_node(p, (RxNode){.kind = (uint8_t)kind, .first = first, .n = n});
}

typedef struct {
    uint32_t *v, n, cap;
} List;

static void list_push(List *l, uint32_t x) {
    if (l->n == l->cap) l->cap = l->cap ? 2 * l->cap : 8, l->v = df_realloc(l->v, l->cap * sizeof *l->v);
    l->v[l->n++] = x;
}

/* ------------------------------------------------------------------ escapes */

static int hex_digit(int c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* n hex digits; -1 when they are not there. */
static int64_t hex_run(Parser *p, int n) {
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        int d = hex_digit(peek(p));
        if (d < 0) return -1;
        v = v * 16 + d, p->at++;
    }
    return v;
}

/* After "\u": HHHH (a high surrogate followed by \uLOW combines) or {H...}. */
static int64_t unicode_escape(Parser *p) {
    if (peek(p) == '{') {
        p->at++;
        int64_t v = 0;
        int digits = 0;
        for (int d; (d = hex_digit(peek(p))) >= 0; p->at++, digits++)
            if ((v = v * 16 + d) > AUTO_MAX_CODE) return -1;
        if (!digits || peek(p) != '}') return -1;
        p->at++;
        return v;
    }
    int64_t v = hex_run(p, 4);
    if (v >= 0xD800 && v <= 0xDBFF && peek(p) == '\\' && peek2(p) == 'u') {
        size_t back = p->at;
        p->at += 2;
        int64_t low = hex_run(p, 4);
        if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        p->at = back;
    }
    return v;
}

/* One escape after the backslash, as a set added to s (a class escape) or a code point. Returns
 * 0, or -1 with a message. in_class: inside [...] (\b is a backspace there, \- a hyphen). */
static int escape(Parser *p, int in_class, Set *s, int *is_class, uint32_t *cp) {
    size_t at = p->at - 1;
    if (at_end(p)) return fail_at(p, at, "a pattern cannot end with a backslash");
    uint32_t c = next_cp(p);
    int64_t v = -1;
    *is_class = 0;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': set_add_class(s, (int)c), *is_class = 1; return 0;
    case 't': v = '\t'; break;
    case 'n': v = '\n'; break;
    case 'v': v = '\v'; break;
    case 'f': v = '\f'; break;
    case 'r': v = '\r'; break;
    case 'x': v = hex_run(p, 2); break;
    case 'u': v = unicode_escape(p); break;
    case 'c':
        if ((peek(p) | 0x20) >= 'a' && (peek(p) | 0x20) <= 'z') v = next_cp(p) % 32;
        break;
    case '0':
        if (peek(p) < '0' || peek(p) > '9') v = 0;
        break;
    case 'b':
        if (in_class) v = '\b';
        else return fail_at(p, at, "word boundaries (\\b) cannot be enforced");
        break;
    case 'B': return fail_at(p, at, "word boundaries (\\B) cannot be enforced");
    case 'k': return fail_at(p, at, "backreferences (\\k<name>) cannot be enforced");
    case 'p': case 'P': return fail_at(p, at, "Unicode property classes (\\p{...}) cannot be enforced");
    case '-':
        if (in_class) v = '-';
        break;
    default:
        if (c >= '1' && c <= '9') return fail_at(p, at, "backreferences (\\1 ...) cannot be enforced");
        if (strchr("^$\\.*+?()[]{}|/", (int)c) && c) v = c;
        break;
    }
    if (v < 0) return fail_at(p, at, "an escape that is not valid in a pattern (with the u flag)");
    *cp = (uint32_t)v;
    return 0;
}

/* ------------------------------------------------------------------ atoms */

static int parse_alt(Parser *p, uint32_t *node);

/* [...] after the '['. */
static int parse_class(Parser *p, uint32_t *node) {
    size_t open = p->at - 1;
    Set s = {0};
    int negate = peek(p) == '^';
    if (negate) p->at++;
    for (;;) {
        if (at_end(p)) return free(s.v), fail_at(p, open, "a '[' without its ']'");
        if (peek(p) == ']') {
            p->at++;
            break;
        }
        uint32_t lo, hi;
        int is_class = 0;
        if (peek(p) == '\\') {
            p->at++;
            if (escape(p, 1, &s, &is_class, &lo)) return free(s.v), -1;
        } else
            lo = next_cp(p);
        if (is_class) {
            if (peek(p) == '-' && peek2(p) != ']' && peek2(p) >= 0)
                return free(s.v), fail_at(p, p->at, "a class escape cannot start a range");
            continue;
        }
        hi = lo;
        if (peek(p) == '-' && peek2(p) != ']' && peek2(p) >= 0) {
            size_t dash = p->at++;
            if (peek(p) == '\\') {
                p->at++;
                Set junk = {0};
                int r = escape(p, 1, &junk, &is_class, &hi);
                free(junk.v);
                if (r) return free(s.v), -1;
                if (is_class) return free(s.v), fail_at(p, dash, "a class escape cannot end a range");
            } else
                hi = next_cp(p);
            if (hi < lo) return free(s.v), fail_at(p, dash, "a range out of order");
        }
        set_add(&s, lo, hi);
    }
    set_normalise(&s);
    if (negate) set_complement(&s);
    *node = set_node(p, &s);
    return 0;
}

static int name_char(int c) {
    return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

/* "(" already read: a group (capturing, non-capturing or named); lookarounds are refused. */
static int parse_group(Parser *p, uint32_t *node) {
    size_t open = p->at - 1;
    if (peek(p) == '?') {
        p->at++;
        int c = peek(p);
        if (c == ':') p->at++;
        else if (c == '=' || c == '!' || (c == '<' && (peek2(p) == '=' || peek2(p) == '!')))
            return fail_at(p, open, "lookahead and lookbehind cannot be enforced");
        else if (c == '<') {
            for (p->at++; !at_end(p) && peek(p) != '>'; p->at++)
                if (!name_char(peek(p))) return fail_at(p, open, "a group name that is not valid");
            if (at_end(p)) return fail_at(p, open, "a group name without its '>'");
            p->at++;
        } else
            return fail_at(p, open, "a '(?' group of a kind that is not valid");
    }
    if (++p->depth > REGEX_MAX_NESTING) return fail_at(p, open, "groups nest too deeply");
    if (parse_alt(p, node)) return -1;
    p->depth--;
    if (peek(p) != ')') return fail_at(p, open, "a '(' without its ')'");
    p->at++;
    return 0;
}

static int parse_atom(Parser *p, uint32_t *node) {
    size_t at = p->at;
    uint32_t c = next_cp(p);
    Set s = {0};
    switch (c) {
    case '(': return parse_group(p, node);
    case '[': return parse_class(p, node);
    case '.':
        set_add(&s, '\n', '\n'), set_add(&s, '\r', '\r'), set_add(&s, 0x2028, 0x2029);
        set_normalise(&s);
        set_complement(&s);
        *node = set_node(p, &s);
        return 0;
    case '\\': {
        int is_class;
        uint32_t cp;
        if (escape(p, 0, &s, &is_class, &cp)) return free(s.v), -1;
        if (!is_class) set_add(&s, cp, cp);
        *node = set_node(p, &s);
        return 0;
    }
    case '*': case '+': case '?': return fail_at(p, at, "a quantifier with nothing to repeat");
    case '{': case '}': case ']': return fail_at(p, at, "a lone '{', '}' or ']' (write it with a backslash)");
    case '^': case '$':
        return fail_at(p, at, "anchors (^ and $) can be enforced only at the start and end of the pattern or of a "
                              "top-level alternative");
    default: *node = char_node(p, c); return 0;
    }
}

/* A decimal count of a {n,m} quantifier; -1 when there is none. */
static int64_t count(Parser *p) {
    int64_t v = -1;
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (peek(p) - '0');
        if (v > 1000000) v = 1000000;
        p->at++;
    }
    return v;
}

/* A quantifier after an atom, if any: *min and *max (INF_REPEAT). Returns 1 when there was one. */
static int parse_quantifier(Parser *p, uint32_t *min, uint32_t *max, int *err) {
    size_t at = p->at;
    int c = peek(p);
    *err = 0;
    if (c == '*' || c == '+' || c == '?') {
        p->at++;
        *min = c == '+', *max = c == '?' ? 1 : INF_REPEAT;
    } else if (c == '{') {
        p->at++;
        int64_t lo = count(p), hi = lo;
        if (peek(p) == ',') p->at++, hi = count(p), hi = hi < 0 ? (int64_t)INF_REPEAT : hi;
        if (lo < 0 || peek(p) != '}') return *err = fail_at(p, at, "a '{' that is not a quantifier {n}, {n,} or {n,m}"), 0;
        p->at++;
        if (hi < lo) return *err = fail_at(p, at, "a quantifier {n,m} with m below n"), 0;
        if (lo > REGEX_MAX_REPEAT || (hi != (int64_t)INF_REPEAT && hi > REGEX_MAX_REPEAT))
            return *err = fail_at(p, at, "a quantifier count above 1000"), 0;
        *min = (uint32_t)lo, *max = (uint32_t)hi;
    } else
        return 0;
    if (peek(p) == '?') p->at++; /* lazy: the same language */
    if (peek(p) == '*' || peek(p) == '+' || peek(p) == '?' || peek(p) == '{')
        return *err = fail_at(p, p->at, "a quantifier with nothing to repeat"), 0;
    return 1;
}

/* ------------------------------------------------------------------ sequences and alternatives */

/* Atoms up to '|', ')' or the end. top: a top-level alternative, where a final '$' anchors it. */
static int parse_seq(Parser *p, int top, int *anchored_end, uint32_t *node) {
    List items = {0};
    int rc = 0;
    *anchored_end = 0;
    while (!at_end(p) && peek(p) != '|' && peek(p) != ')') {
        if (top && peek(p) == '$' && (peek2(p) < 0 || peek2(p) == '|')) {
            p->at++, *anchored_end = 1;
            break;
        }
        uint32_t atom = 0, min, max;
        int err;
        if ((rc = parse_atom(p, &atom))) break;
        if (parse_quantifier(p, &min, &max, &err))
            atom = add_node(p, (RxNode){.kind = RX_REP, .min = min, .max = max, .first = atom});
        if ((rc = err)) break;
        list_push(&items, atom);
    }
    if (!rc) *node = list_node(p, RX_CAT, items.v, items.n);
    free(items.v);
    return rc;
}

static int parse_alt(Parser *p, uint32_t *node) {
    List alts = {0};
    int rc = 0, anchored;
    for (;;) {
        uint32_t seq;
        if ((rc = parse_seq(p, 0, &anchored, &seq))) break;
        list_push(&alts, seq);
        if (peek(p) != '|') break;
        p->at++;
    }
    if (!rc) *node = list_node(p, RX_ALT, alts.v, alts.n);
    free(alts.v);
    return rc;
}

/* ------------------------------------------------------------------ Thompson's construction */

static void emit(const Parser *p, Nfa *n, uint32_t node, uint32_t from, uint32_t to);

static void emit_repeat(const Parser *p, Nfa *n, const RxNode *r, uint32_t from, uint32_t to) {
    uint32_t child = r->first, cur = from;
    for (uint32_t i = 0; i < r->min && !n->too_big; i++) {
        uint32_t next = nfa_state(n);
        emit(p, n, child, cur, next);
        cur = next;
    }
    if (r->max == INF_REPEAT) {
        uint32_t loop = nfa_state(n);
        nfa_eps(n, cur, loop);
        emit(p, n, child, loop, loop);
        nfa_eps(n, loop, to);
        return;
    }
    for (uint32_t i = r->min; i < r->max && !n->too_big; i++) {
        uint32_t next = nfa_state(n);
        nfa_eps(n, cur, to);
        emit(p, n, child, cur, next);
        cur = next;
    }
    nfa_eps(n, cur, to);
}

static void emit(const Parser *p, Nfa *n, uint32_t node, uint32_t from, uint32_t to) {
    if (n->too_big) return;
    const RxNode *r = &p->nodes[node];
    switch (r->kind) {
    case RX_SET:
        for (uint32_t i = 0; i < r->n; i++) nfa_edge(n, from, to, p->ranges[r->first + i].lo, p->ranges[r->first + i].hi);
        return;
    case RX_ALT:
        for (uint32_t i = 0; i < r->n; i++) emit(p, n, p->kids[r->first + i], from, to);
        return;
    case RX_CAT: {
        if (!r->n) nfa_eps(n, from, to);
        uint32_t cur = from;
        for (uint32_t i = 0; i < r->n; i++) {
            uint32_t next = i + 1 == r->n ? to : nfa_state(n);
            emit(p, n, p->kids[r->first + i], cur, next);
            cur = next;
        }
        return;
    }
    case RX_REP: emit_repeat(p, n, r, from, to); return;
    }
}

/* ------------------------------------------------------------------ the pattern */

int regex_nfa(const char *pattern, size_t len, Nfa *n, uint32_t *start) {
    Parser p = {.text = (const uint8_t *)pattern, .len = len};
    uint32_t s = *start = nfa_state(n), accept = nfa_state(n);
    n->accept[accept] = 1;
    int rc = 0;
    for (;;) {
        int anchored_start = peek(&p) == '^', anchored_end;
        if (anchored_start) p.at++;
        uint32_t seq;
        if ((rc = parse_seq(&p, 1, &anchored_end, &seq))) break;
        uint32_t from = s, mid = nfa_state(n);
        if (!anchored_start) from = nfa_state(n), nfa_eps(n, s, from), nfa_any(n, from, from);
        emit(&p, n, seq, from, mid);
        if (!anchored_end) nfa_any(n, mid, mid);
        nfa_eps(n, mid, accept);
        if (peek(&p) == ')') {
            rc = fail_at(&p, p.at, "a ')' without its '('");
            break;
        }
        if (at_end(&p)) break;
        p.at++; /* '|' */
    }
    free(p.nodes), free(p.kids), free(p.ranges);
    if (!rc && n->too_big) rc = df_fail("the pattern needs an automaton of more than %u states", AUTO_MAX_NFA);
    return rc;
}

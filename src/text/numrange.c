/* numrange.c - number DFAs by breadth-first search over a small state (see numrange.h): the
 * phase of the number's text, its sign, digit counts, the comparison of its magnitude so far
 * with each bound's magnitude, and the remainder of its integer part. */
#include "text/numrange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* The same digit bounds as the unconstrained NUMBER node (match_step.h). */
#define INT_DIGITS 15
#define FRAC_DIGITS 15

enum { P_START, P_MINUS, P_ZERO, P_INT, P_DOT, P_FRAC };

typedef struct {
    uint8_t phase, neg, ilen, flen, sig, nonzero;
    int8_t c[2];   /* per bound (0: lo, 1: hi): the magnitude so far against the bound's (-1, 0, 1);
                    * while the integer part is read, against the bound's digits at the same
                    * positions; from the '.' on, the whole comparison */
    uint32_t rem;  /* the integer part modulo the multiple */
} NumState;

/* ------------------------------------------------------------------ decimals */

static void strip(Decimal *d) {
    size_t z = strspn(d->ip, "0");
    memmove(d->ip, d->ip + z, strlen(d->ip + z) + 1);
    size_t n = strlen(d->fp);
    while (n && d->fp[n - 1] == '0') d->fp[--n] = 0;
    if (!d->ip[0] && !d->fp[0]) d->neg = 0;
}

void decimal_of_double(double v, Decimal *d) {
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    memset(d, 0, sizeof *d);
    const char *p = buf;
    d->neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    char digits[32];
    int n = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && n < 31) digits[n++] = *p;
    int point = (*p == 'e' ? atoi(p + 1) : 0) + 1; /* digits[0..point) are the integer part */
    size_t ip = 0, fp = 0;
    for (int i = point; i < 0 && fp < NUM_DECIMAL_MAX; i++) d->fp[fp++] = '0';
    for (int i = 0; i < n; i++) {
        if (i < point && ip < NUM_DECIMAL_MAX) d->ip[ip++] = digits[i];
        else if (i >= point && fp < NUM_DECIMAL_MAX) d->fp[fp++] = digits[i];
    }
    for (int i = n; i < point && ip < NUM_DECIMAL_MAX; i++) d->ip[ip++] = '0';
    strip(d);
}

void decimal_of_int(int64_t v, Decimal *d) {
    char buf[32];
    memset(d, 0, sizeof *d);
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    d->neg = buf[0] == '-';
    snprintf(d->ip, sizeof d->ip, "%s", buf + d->neg);
    strip(d);
}

/* ------------------------------------------------------------------ comparisons */

static int8_t cmp_digit(int d, char b) {
    int bv = b ? b - '0' : 0;
    return (int8_t)(d < bv ? -1 : d > bv);
}

/* The magnitude of the integer part read so far against bound b's, once the part has ended. */
static int8_t int_final(const NumState *s, const Decimal *b, int8_t c) {
    size_t len = strlen(b->ip), ilen = s->phase == P_ZERO ? 0 : s->ilen;
    return ilen < len ? -1 : ilen > len ? 1 : c;
}

/* The whole magnitude against bound b's, at the end of the number. */
static int magnitude_cmp(const NumState *s, const Decimal *b, int8_t c) {
    if (s->phase == P_FRAC) return c ? c : strlen(b->fp) > s->flen ? -1 : 0;
    c = int_final(s, b, c);
    return c ? c : b->fp[0] ? -1 : 0;
}

/* Whether the number ending in s stands in the bound's relation (lo: above, hi: below). */
static int within(const NumState *s, const Decimal *b, int8_t c, int excl, int is_hi) {
    int m = magnitude_cmp(s, b, c), v;
    if (!s->neg && !b->neg) v = m;
    else if (!s->neg) v = 1;
    else if (!b->neg) v = -1;
    else v = -m;
    if (is_hi) v = -v;
    return v > 0 || (v == 0 && !excl);
}

static int accepting(const NumSpec *sp, const NumState *s) {
    if (s->phase != P_ZERO && s->phase != P_INT && s->phase != P_FRAC) return 0;
    if (s->neg && !s->nonzero) return 0; /* -0 */
    if (sp->multiple && s->rem) return 0;
    if (sp->has_lo && !within(s, &sp->lo, s->c[0], sp->lo_excl, 0)) return 0;
    if (sp->has_hi && !within(s, &sp->hi, s->c[1], sp->hi_excl, 1)) return 0;
    return 1;
}

/* ------------------------------------------------------------------ one byte */

static const Decimal *bound(const NumSpec *sp, int k) { return k ? &sp->hi : &sp->lo; }
static int has_bound(const NumSpec *sp, int k) { return k ? sp->has_hi : sp->has_lo; }

static int int_digit(const NumSpec *sp, NumState *s, int d) {
    if ((s->phase == P_START || s->phase == P_MINUS) && d == 0) return s->phase = P_ZERO, 0;
    if (s->phase == P_INT && s->ilen == INT_DIGITS) return -1;
    s->phase = P_INT, s->ilen++, s->sig = s->ilen, s->nonzero = 1;
    for (int k = 0; k < 2; k++) {
        if (!has_bound(sp, k)) continue;
        const char *ip = bound(sp, k)->ip;
        if (s->ilen > strlen(ip)) s->c[k] = 1; /* longer than the bound's integer part */
        else if (s->c[k] == 0) s->c[k] = cmp_digit(d, ip[s->ilen - 1]);
    }
    if (sp->multiple) s->rem = (s->rem * 10 + (uint32_t)d) % sp->multiple;
    return 0;
}

static int frac_digit(const NumSpec *sp, NumState *s, int d) {
    if (s->phase == P_FRAC && s->flen == FRAC_DIGITS) return -1;
    s->phase = P_FRAC;
    for (int k = 0; k < 2; k++) {
        if (!has_bound(sp, k) || s->c[k]) continue;
        const char *fp = bound(sp, k)->fp;
        s->c[k] = cmp_digit(d, s->flen < strlen(fp) ? fp[s->flen] : 0);
    }
    s->flen++;
    if (s->nonzero) s->sig++;
    else if (d) s->sig = 1, s->nonzero = 1;
    return (sp->has_lo || sp->has_hi) && s->sig > NUM_SIG_DIGITS ? -1 : 0;
}

/* The state after byte u, or -1 when u cannot come next. */
static int step(const NumSpec *sp, NumState *s, int u) {
    int digit = u >= '0' && u <= '9' ? u - '0' : -1;
    switch (s->phase) {
    case P_START:
        if (u == '-') return s->phase = P_MINUS, s->neg = 1, 0;
        /* fall through */
    case P_MINUS: return digit < 0 ? -1 : int_digit(sp, s, digit);
    case P_ZERO:
    case P_INT:
        if (digit >= 0 && s->phase == P_INT) return int_digit(sp, s, digit);
        if (u != '.' || sp->integer) return -1;
        for (int k = 0; k < 2; k++)
            if (has_bound(sp, k)) s->c[k] = int_final(s, bound(sp, k), s->c[k]);
        s->phase = P_DOT;
        return 0;
    case P_DOT:
    case P_FRAC: return digit < 0 ? -1 : frac_digit(sp, s, digit);
    }
    return -1;
}

/* ------------------------------------------------------------------ the search */

static const int bytes[] = {'-', '.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'};

int number_dfa(const NumSpec *sp, uint32_t max_states, Dfa *out) {
    IdMap map = {0};
    DfaBuilder b = {0};
    NumState s;
    memset(&s, 0, sizeof s);
    int added, rc = 0;
    idmap_get(&map, &s, sizeof s, &added);
    db_state(&b, 0);
    for (uint32_t id = 0; id < b.d.n_states && !rc; id++) {
        size_t len;
        NumState from;
        memcpy(&from, idmap_key(&map, id, &len), sizeof from);
        db_begin(&b, id);
        for (size_t i = 0; i < sizeof bytes / sizeof *bytes && !rc; i++) {
            NumState to = from;
            if (step(sp, &to, bytes[i])) continue;
            uint32_t t = idmap_get(&map, &to, sizeof to, &added);
            if (added && t >= max_states) rc = df_fail("the numbers in range need an automaton of more than %u states", max_states);
            else {
                if (added) db_state(&b, accepting(sp, &to));
                db_edge(&b, (uint32_t)bytes[i], (uint32_t)bytes[i], t);
            }
        }
    }
    db_finish(&b);
    *out = b.d;
    idmap_free(&map);
    if (!rc && dfa_prune(out))
        rc = df_fail("no number in this range can be written (numbers are written with at most 15 integer digits, "
                     "15 fraction digits and 15 significant digits)");
    if (rc) dfa_free(out);
    return rc;
}

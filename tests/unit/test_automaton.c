/* test_automaton - the automata behind patterns, formats and numeric ranges (text/regex.h,
 * text/automaton.h, text/numrange.h) against independent references: PCRE2 decides whether each
 * of thousands of random strings matches a pattern (with the options that give ECMAScript's
 * meaning on the strings tried), and a number in range is decided by comparing the double the
 * text parses to, as JSON Schema validators do. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/numrange.h"
#include "text/regex.h"
#include "util/err.h"
#include "util/rng.h"

/* ------------------------------------------------------------------ running automata */

static int utf8_next(const unsigned char **p, const unsigned char *end, uint32_t *cp) {
    uint32_t c = **p;
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (end - *p < n) return -1;
    if (n > 1) c &= 0x3Fu >> (n - 1);
    for (int i = 1; i < n; i++) c = c << 6 | ((*p)[i] & 0x3F);
    *p += n;
    *cp = c;
    return 0;
}

/* Runs d over symbols; 1 when it ends in an accepting state. */
static int dfa_run(const Dfa *d, const uint32_t *sym, size_t n) {
    uint32_t s = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = d->first[s], e = d->first[s + 1];
        while (i < e && !(d->e[i].lo <= sym[k] && sym[k] <= d->e[i].hi)) i++;
        if (i == e) return 0;
        s = d->e[i].to;
    }
    return d->accept[s];
}

static int dfa_run_bytes(const Dfa *d, const char *s, size_t n) {
    uint32_t sym[256];
    for (size_t i = 0; i < n && i < 256; i++) sym[i] = (unsigned char)s[i];
    return dfa_run(d, sym, n);
}

static int dfa_run_utf8(const Dfa *d, const char *s, size_t n) {
    uint32_t sym[256];
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end && k < 256)
        if (utf8_next(&p, end, &sym[k++])) return -1;
    return dfa_run(d, sym, k);
}

/* ------------------------------------------------------------------ patterns against PCRE2 */

/* Characters the random strings are made of: ASCII that patterns care about, three multi-byte
 * characters, and what JSON escapes. No Unicode spaces or line separators: there PCRE2's \s and .
 * mean less than ECMAScript's. */
static const char *const pieces[] = {"a", "b", "c", "x", "A", "Z", "0", "5", "9", "-", "_", ".", " ", "\n",
                                     "\r", "\t", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\"", "\\"};

static size_t random_string(Rng *r, char *buf) {
    size_t n = 0, len = rng_next(r) % 9;
    for (size_t i = 0; i < len; i++) {
        const char *p = pieces[rng_next(r) % (sizeof pieces / sizeof *pieces)];
        memcpy(buf + n, p, strlen(p)), n += strlen(p);
    }
    buf[n] = 0;
    return n;
}

static void pattern_agrees_with_pcre2(const char *pattern) {
    Nfa n = {0};
    Dfa cp = {0}, json = {0}, raw = {0};
    uint32_t start;
    int rc = regex_nfa(pattern, strlen(pattern), &n, &start);
    CHECK_MSG(rc == 0, "%s: %s", pattern, df_errmsg());
    if (!rc) rc = dfa_from_nfa(&n, start, AUTO_MAX_STATES, "p", &cp);
    CHECK_MSG(rc == 0, "%s: %s", pattern, df_errmsg());
    if (!rc) rc = dfa_spell_utf8(&cp, 1, AUTO_MAX_STATES, "p", &json) || dfa_spell_utf8(&cp, 0, AUTO_MAX_STATES, "p", &raw);
    CHECK_MSG(rc == 0, "%s: %s", pattern, df_errmsg());
    int err;
    PCRE2_SIZE off;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_ANYCRLF); /* '.' excludes \r as well as \n, as in ECMAScript */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY,
                                   &err, &off, cc);
    CHECK_MSG(re != NULL, "%s: PCRE2 refuses it", pattern);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    Rng r;
    rng_seed(&r, 7);
    int matched = 0, wrong = 0;
    for (int t = 0; t < 4000 && re && !rc && wrong < 3; t++) {
        char s[64];
        size_t len = random_string(&r, s);
        if (t < 3) len = 0, s[0] = 0; /* the empty string too */
        int want = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL) >= 0;
        json_t *str = json_stringn(s, len);
        char *quoted = json_dumps(str, JSON_ENCODE_ANY);
        int got = dfa_run_utf8(&cp, s, len), got_json = dfa_run_bytes(&json, quoted, strlen(quoted));
        int got_raw = dfa_run_bytes(&raw, s, len);
        matched += want;
        if (got != want || got_json != want || got_raw != want) wrong++;
        CHECK_MSG(got == want && got_json == want && got_raw == want,
                  "/%s/ on %s: PCRE2 %d, code points %d, JSON text %d, raw text %d", pattern, quoted, want, got, got_json,
                  got_raw);
        free(quoted);
        json_decref(str);
    }
    CHECK_MSG(!re || matched > 0, "/%s/: no random string matched (a weak test)", pattern);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    pcre2_compile_context_free(cc);
    nfa_free(&n), dfa_free(&cp), dfa_free(&json), dfa_free(&raw);
}

static void patterns_agree_with_pcre2(void) {
    static const char *const patterns[] = {
        "a",
        "^[a-c]+$",
        "ab|cd|^x",
        "^(a|b)*c$",
        "x{2,3}",
        "^[^a-c\\d]{1,3}$",
        "\\w+\\.\\w",
        "^\\s*$",
        "^\\S{2}\\D$",
        "^.{2}$",
        "a.c",
        "^(?:a|b)+?$",
        "^[-_]|[_-]$",
        "^\\d{1,2}(\\.\\d)?$",
        "^$",
        "(?<n>a)b",
        "^a|b$",
        "[\\]\\-]",
        "\\\\",
        "\"",
        "^[\\u00e9\\u4e2d]+$",
        "^[\\x41-\\x5a]",
        "^[^\\n]*$",
        "[\\W]",
        "\\t|\\r",
        "^a{0}b{1,}c?$",
        "^(?:a|)b",
    };
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) pattern_agrees_with_pcre2(patterns[i]);
}

/* ------------------------------------------------------------------ numbers against doubles */

typedef struct {
    const char *name;
    int integer;
    int has_lo, lo_excl;
    double lo;
    int has_hi, hi_excl;
    double hi;
    uint32_t multiple;
} Range;

/* A random number text: sometimes odd (leading zeros, "-0", long), mostly plausible. */
static void random_number(Rng *r, char *buf) {
    size_t n = 0;
    if (rng_next(r) % 3 == 0) buf[n++] = '-';
    int idigits = (int)(rng_next(r) % 17), fdigits = rng_next(r) % 2 ? (int)(rng_next(r) % 17) : 0;
    if (!idigits) buf[n++] = '0';
    for (int i = 0; i < idigits; i++) buf[n++] = (char)(i == 0 && rng_next(r) % 8 ? '1' + rng_next(r) % 9 : '0' + rng_next(r) % 10);
    if (fdigits) buf[n++] = '.';
    for (int i = 0; i < fdigits; i++) buf[n++] = (char)('0' + rng_next(r) % 10);
    buf[n] = 0;
}

/* The digits a validator's double and the writer's subset care about. */
static int significant_digits(const char *s) {
    int n = 0, seen = 0;
    for (; *s; s++)
        if (*s >= '1' && *s <= '9') seen = 1, n++;
        else if (*s == '0' && seen) n++;
    return n;
}

static int canonical(const char *s, int integer) {
    const char *p = s + (*s == '-');
    if (strspn(p, "0123456789.") != strlen(p) || strchr(p, '.') != strrchr(p, '.') || *p == '.' || p[strlen(p) - 1] == '.')
        return 0;
    size_t ip = strcspn(p, "."), fp = p[ip] ? strlen(p + ip + 1) : 0;
    if ((ip > 1 && p[0] == '0') || ip > 15 || fp > 15 || (integer && p[ip])) return 0;
    if (*s == '-' && strspn(p, "0.") == strlen(p)) return 0; /* -0 */
    return significant_digits(s) <= 15;
}

static int in_range(const Range *g, double x, const char *text) {
    if (g->integer && strchr(text, '.')) return 0;
    if (g->has_lo && (g->lo_excl ? !(x > g->lo) : !(x >= g->lo))) return 0;
    if (g->has_hi && (g->hi_excl ? !(x < g->hi) : !(x <= g->hi))) return 0;
    if (g->multiple && (x != x || fmod(x, (double)g->multiple) != 0)) return 0;
    return 1;
}

static void range_agrees_with_doubles(const Range *g) {
    NumSpec sp;
    memset(&sp, 0, sizeof sp);
    sp.integer = g->integer, sp.multiple = g->multiple;
    sp.has_lo = g->has_lo, sp.lo_excl = g->lo_excl, sp.has_hi = g->has_hi, sp.hi_excl = g->hi_excl;
    if (g->has_lo) decimal_of_double(g->lo, &sp.lo);
    if (g->has_hi) decimal_of_double(g->hi, &sp.hi);
    Dfa d;
    int rc = number_dfa(&sp, AUTO_MAX_STATES, &d);
    CHECK_MSG(rc == 0, "%s: %s", g->name, df_errmsg());
    if (rc) return;
    Rng r;
    rng_seed(&r, 11);
    int accepted = 0, wrong = 0;
    for (int t = 0; t < 20000 && wrong < 3; t++) {
        char s[64];
        random_number(&r, s);
        if (t < 64) /* numbers at the bounds themselves, and next to them */
            snprintf(s, sizeof s, "%.*f", t / 4 % 16, (t % 2 ? g->hi : g->lo) + (t % 4 < 2 ? 0 : 1e-9));
        int got = dfa_run_bytes(&d, s, strlen(s)), want = in_range(g, strtod(s, NULL), s);
        accepted += got;
        if (got && !want) wrong++;
        CHECK_MSG(!got || want, "%s: %s is written but out of range", g->name, s);
        if (want && canonical(s, g->integer) && !got) wrong++;
        CHECK_MSG(!(want && canonical(s, g->integer)) || got, "%s: %s is in range but never written", g->name, s);
    }
    CHECK_MSG(accepted > 0, "%s: no random number was in range (a weak test)", g->name);
    dfa_free(&d);
}

static void ranges_agree_with_doubles(void) {
    static const Range ranges[] = {
        {"integer 0..9", 1, 1, 0, 0, 1, 0, 9, 0},
        {"integer -50..50 multiple of 7", 1, 1, 0, -50, 1, 0, 50, 7},
        {"integer > 0.5", 1, 1, 1, 0.5, 0, 0, 0, 0},
        {"integer < -3", 1, 0, 0, 0, 1, 1, -3, 0},
        {"number -2.5..3.75 exclusive", 0, 1, 0, -2.5, 1, 1, 3.75, 0},
        {"number (0.1, 0.2]", 0, 1, 1, 0.1, 1, 0, 0.2, 0},
        {"number within +-1e300", 0, 1, 0, -1e300, 1, 0, 1e300, 0},
        {"number around 1e-20", 0, 1, 0, -1e-20, 1, 0, 1e-20, 0},
        {"number (0, 1)", 0, 1, 1, 0, 1, 1, 1, 0},
        {"number >= 123456.789", 0, 1, 0, 123456.789, 0, 0, 0, 0},
        {"number <= -0.000321", 0, 0, 0, 0, 1, 0, -0.000321, 0},
        {"number 17 digits: 0.30000000000000004..1", 0, 1, 0, 0.30000000000000004, 1, 0, 1, 0},
        {"multiple of 100", 1, 0, 0, 0, 0, 0, 0, 100},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) range_agrees_with_doubles(&ranges[i]);
}

/* Decimals are the shortest text that reads back as the double. */
static void decimals_round_trip(void) {
    static const double v[] = {0, 0.1, -2.5, 1e300, 1e-20, 123456.789, 0.30000000000000004, -0.0, 5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        Decimal d;
        decimal_of_double(v[i], &d);
        char text[2 * NUM_DECIMAL_MAX + 4];
        snprintf(text, sizeof text, "%s%s%s%s%s", d.neg ? "-" : "", d.ip[0] ? d.ip : "0", d.fp[0] ? "." : "", d.fp, "");
        CHECK_MSG(strtod(text, NULL) == v[i], "%.17g -> %s", v[i], text);
        CHECK_MSG(!d.ip[0] || d.ip[0] != '0', "%.17g: leading zero in %s", v[i], d.ip);
    }
    Decimal d;
    decimal_of_int(-9223372036854775807LL - 1, &d);
    CHECK(d.neg && !strcmp(d.ip, "9223372036854775808") && !d.fp[0]);
}

/* Syntax ECMAScript has and PCRE2 has not: [] matches nothing, [^] any character, \\uHIGH\\uLOW
 * one astral character. */
static void javascript_only_syntax(void) {
    static const struct {
        const char *pattern, *text;
        int match;
    } cases[] = {
        {"^[]", "a", 0}, {"^[]", "", 0}, {"^[^]$", "\n", 1}, {"^[^]$", "\xe4\xb8\xad", 1}, {"^[^]$", "ab", 0},
        {"^\\uD83D\\uDE00$", "\xf0\x9f\x98\x80", 1}, {"^\\u{1F600}$", "\xf0\x9f\x98\x80", 1}, {"^\\cJ$", "\n", 1},
        {"\\uD83D", "\xf0\x9f\x98\x80", 0}, /* a lone surrogate matches no character that can be written */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Nfa n = {0};
        Dfa d = {0};
        uint32_t start;
        int rc = regex_nfa(cases[i].pattern, strlen(cases[i].pattern), &n, &start) ||
                 dfa_from_nfa(&n, start, AUTO_MAX_STATES, "p", &d);
        CHECK_MSG(!rc && dfa_run_utf8(&d, cases[i].text, strlen(cases[i].text)) == cases[i].match, "/%s/ on '%s': %s",
                  cases[i].pattern, cases[i].text, rc ? df_errmsg() : "wrong answer");
        nfa_free(&n), dfa_free(&d);
    }
}

int main(void) {
    RUN(patterns_agree_with_pcre2);
    RUN(javascript_only_syntax);
    RUN(ranges_agree_with_doubles);
    RUN(decimals_round_trip);
    return check_summary();
}

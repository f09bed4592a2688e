/* schema_oracle.h - an independent reference for the constrained-decoding tests. It reads a JSON
 * Schema (the subset of src/text/jsonschema.h) directly and decides, by backtracking over the
 * text, which JSON texts the compiler promises to allow: compact JSON, declared properties in
 * declared order (optional ones may be left out), enum values as jansson's compact text, and
 * the string and number policies of jsonschema.h. It shares no code with the compiler or the
 * matcher: a mask that differs from it is a bug in one of the two.
 *
 * orc_value(o, schema, types, pos, out) collects every position where a value starting at pos
 * can end (out->end) and notes when the text ran out while the value was still valid
 * (out->eof: the text is a valid prefix). */
#ifndef DF_SCHEMA_ORACLE_H
#define DF_SCHEMA_ORACLE_H

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_pointer.h"

#define ORC_MAX_ENDS 512
enum { OT_NULL = 1, OT_BOOL = 2, OT_OBJECT = 4, OT_ARRAY = 8, OT_NUMBER = 16, OT_STRING = 32, OT_ALL = 63 };

typedef struct {
    int eof, n;
    int end[ORC_MAX_ENDS];
} OrcEnds;

typedef struct {
    const json_t *root;
    const uint8_t *s;
    int n;
} Orc;

static void orc_add(OrcEnds *e, int p) {
    for (int i = 0; i < e->n; i++)
        if (e->end[i] == p) return;
    if (e->n == ORC_MAX_ENDS) {
        fprintf(stderr, "oracle: too many end positions\n");
        exit(2);
    }
    e->end[e->n++] = p;
}

/* A fixed text at pos. */
static void orc_lit(const Orc *o, const char *l, size_t len, int pos, OrcEnds *out) {
    size_t have = (size_t)(o->n - pos);
    if (have >= len) {
        if (!memcmp(o->s + pos, l, len)) orc_add(out, pos + (int)len);
    } else if (!memcmp(o->s + pos, l, have))
        out->eof = 1;
}

/* UTF-8: the length of the well-formed sequence at s[0..n) (0 if ill-formed; -1 if it is a
 * well-formed but cut prefix). Table 3-7 of the Unicode standard. */
static int orc_utf8(const uint8_t *s, int n) {
    uint8_t c = s[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    for (int i = 1; i < need; i++) {
        if (i >= n) return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return 0;
    }
    return need;
}

static int orc_hex(uint8_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

/* A quoted JSON string of min..max characters. */
static void orc_string(const Orc *o, int pos, long min, long max, OrcEnds *out) {
    if (pos >= o->n) {
        out->eof = 1;
        return;
    }
    if (o->s[pos] != '"') return;
    long count = 0;
    for (int p = pos + 1;;) {
        if (p >= o->n) {
            out->eof = 1;
            return;
        }
        uint8_t c = o->s[p];
        if (c == '"') {
            if (count >= min) orc_add(out, p + 1);
            return;
        }
        if (count >= max || c < 0x20) return;
        count++;
        if (c == '\\') {
            if (p + 1 >= o->n) {
                out->eof = 1;
                return;
            }
            uint8_t e = o->s[p + 1];
            if (e == 'u') {
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    if (p + 2 + k >= o->n) {
                        /* a cut escape is a valid prefix unless already a surrogate half */
                        if (!(k >= 2 && v >> ((k - 2) * 4) >= 0xD8 && v >> ((k - 2) * 4) <= 0xDF)) out->eof = 1;
                        return;
                    }
                    uint8_t h = o->s[p + 2 + k];
                    if (!orc_hex(h)) return;
                    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                if ((v >= 0xD800 && v <= 0xDFFF) || v == 0) return;
                p += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                p += 2;
            } else
                return;
            continue;
        }
        int len = orc_utf8(o->s + p, o->n - p);
        if (len == 0) return;
        if (len < 0) {
            out->eof = 1;
            return;
        }
        p += len;
    }
}

static int orc_digits(const Orc *o, int p) {
    int k = 0;
    while (p + k < o->n && o->s[p + k] >= '0' && o->s[p + k] <= '9') k++;
    return k;
}

/* A number per the policy: -?(0|[1-9]d{0,14})(.d{1,15})?([eE][+-]?d{1,2})? (integers: no
 * fraction, no exponent). Every place a number can end is an end. */
static void orc_number(const Orc *o, int pos, int integer, OrcEnds *out) {
    int p = pos;
    if (p < o->n && o->s[p] == '-') p++;
    if (p >= o->n) {
        out->eof = 1;
        return;
    }
    int d = orc_digits(o, p);
    if (d == 0) return;
    int lim = o->s[p] == '0' ? 1 : 15;
    for (int k = 1; k <= d && k <= lim; k++) orc_add(out, p + k);
    if (p + d >= o->n && d <= lim) out->eof = 1;
    if (integer || d > lim) return;
    p += d;
    if (p < o->n && o->s[p] == '.') {
        p++;
        int f = orc_digits(o, p);
        if (p + f >= o->n && f <= 15) out->eof = 1;
        if (f == 0) return;
        for (int k = 1; k <= f && k <= 15; k++) orc_add(out, p + k);
        if (f > 15) return;
        p += f;
    }
    if (p < o->n && (o->s[p] == 'e' || o->s[p] == 'E')) {
        p++;
        if (p < o->n && (o->s[p] == '+' || o->s[p] == '-')) p++;
        int e = orc_digits(o, p);
        if (p + e >= o->n && e <= 2) out->eof = 1;
        for (int k = 1; k <= e && k <= 2; k++) orc_add(out, p + k);
    }
}

static void orc_value(const Orc *o, const json_t *s, int types, int pos, OrcEnds *out);

static void orc_any(const Orc *o, int types, int pos, OrcEnds *out) {
    json_t *t = json_true();
    orc_value(o, t, types, pos, out);
}

static int orc_required(const json_t *req, const char *name) {
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!strcmp(json_string_value(json_array_get(req, i)), name)) return 1;
    return 0;
}

/* Members in declared order: states are (position, wrote a member yet). */
static void orc_members(const Orc *o, const json_t *props, const json_t *req, int pos, OrcEnds *out) {
    OrcEnds st[2] = {{0}, {0}}; /* st[w]: positions with w = wrote any */
    orc_lit(o, "{", 1, pos, &st[0]);
    out->eof |= st[0].eof;
    st[0].eof = 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        OrcEnds next[2] = {{0}, {0}};
        int req_k = orc_required(req, key);
        if (!req_k) next[0] = st[0], next[1] = st[1];
        json_t *ks = json_string(key);
        char *q = json_dumps(ks, JSON_ENCODE_ANY); /* a name is written as jansson writes the string */
        json_decref(ks);
        size_t ql = strlen(q);
        char *lit = malloc(ql + 3);
        for (int w = 0; w < 2; w++)
            for (int i = 0; i < st[w].n; i++) {
                OrcEnds k = {0}, val = {0};
                int p = st[w].end[i];
                snprintf(lit, ql + 3, "%s%s:", w ? "," : "", q);
                orc_lit(o, lit, strlen(lit), p, &k);
                out->eof |= k.eof;
                for (int j = 0; j < k.n; j++) orc_value(o, v, OT_ALL, k.end[j], &val);
                out->eof |= val.eof;
                for (int j = 0; j < val.n; j++) orc_add(&next[1], val.end[j]);
            }
        free(lit), free(q);
        st[0] = next[0], st[1] = next[1];
    }
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < st[w].n; i++) orc_lit(o, "}", 1, st[w].end[i], out);
}

/* open (item (sep item)*)? close, count in [min, max]; item NULL: key ":" value of a map. */
static void orc_repeat(const Orc *o, const json_t *item, const json_t *map_value, long min, long max, const char *open,
                       const char *close, int pos, OrcEnds *out) {
    OrcEnds cur = {0};
    orc_lit(o, open, 1, pos, &cur);
    out->eof |= cur.eof;
    cur.eof = 0;
    for (long count = 0; cur.n; count++) {
        if (count >= min)
            for (int i = 0; i < cur.n; i++) orc_lit(o, close, 1, cur.end[i], out);
        if (count >= max) break;
        OrcEnds next = {0};
        for (int i = 0; i < cur.n; i++) {
            OrcEnds start = {0};
            if (count) orc_lit(o, ",", 1, cur.end[i], &start);
            else orc_add(&start, cur.end[i]);
            out->eof |= start.eof;
            for (int j = 0; j < start.n; j++) {
                OrcEnds got = {0};
                if (item) orc_value(o, item, OT_ALL, start.end[j], &got);
                else {
                    OrcEnds k = {0}, colon = {0};
                    orc_string(o, start.end[j], 0, LONG_MAX, &k);
                    out->eof |= k.eof;
                    for (int m = 0; m < k.n; m++) orc_lit(o, ":", 1, k.end[m], &colon);
                    out->eof |= colon.eof;
                    for (int m = 0; m < colon.n; m++) orc_value(o, map_value, OT_ALL, colon.end[m], &got);
                }
                out->eof |= got.eof;
                for (int m = 0; m < got.n; m++) orc_add(&next, got.end[m]);
            }
        }
        cur = next;
        cur.eof = 0;
    }
}

static long orc_count(const json_t *s, const char *key, long dflt) {
    const json_t *v = json_object_get(s, key);
    return v ? (long)json_integer_value(v) : dflt;
}

/* The JSON type bit of a value; *integral when it is a whole number. */
static int orc_type_of(const json_t *v, int *integral) {
    *integral = json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    if (json_is_null(v)) return OT_NULL;
    if (json_is_boolean(v)) return OT_BOOL;
    if (json_is_object(v)) return OT_OBJECT;
    if (json_is_array(v)) return OT_ARRAY;
    if (json_is_string(v)) return OT_STRING;
    return OT_NUMBER;
}

static int orc_type_bits(const json_t *t, int *integer) {
    static const char *const names[] = {"null", "boolean", "object", "array", "number", "string"};
    int bits = 0, number = 0;
    *integer = 0;
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
        const char *n = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        if (!strcmp(n, "integer")) bits |= OT_NUMBER, *integer = 1;
        for (int k = 0; k < 6; k++)
            if (!strcmp(n, names[k])) bits |= 1 << k, number |= k == 4;
    }
    if (number) *integer = 0;
    return bits;
}

static void orc_typed(const Orc *o, const json_t *s, int types, int pos, OrcEnds *out) {
    int integer, bits = orc_type_bits(json_object_get(s, "type"), &integer) & types;
    if (bits & OT_NULL) orc_lit(o, "null", 4, pos, out);
    if (bits & OT_BOOL) orc_lit(o, "true", 4, pos, out), orc_lit(o, "false", 5, pos, out);
    if (bits & OT_NUMBER) orc_number(o, pos, integer, out);
    if (bits & OT_STRING) orc_string(o, pos, orc_count(s, "minLength", 0), orc_count(s, "maxLength", LONG_MAX), out);
    if (bits & OT_ARRAY) {
        const json_t *items = json_object_get(s, "items");
        long max = json_is_false(items) ? 0 : orc_count(s, "maxItems", LONG_MAX);
        orc_repeat(o, items && !json_is_false(items) ? items : json_true(), NULL, orc_count(s, "minItems", 0), max, "[", "]", pos, out);
    }
    if (bits & OT_OBJECT) {
        const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        if (json_object_size(props) || json_is_false(addl)) orc_members(o, props, json_object_get(s, "required"), pos, out);
        else orc_repeat(o, NULL, json_is_object(addl) ? addl : json_true(), 0, LONG_MAX, "{", "}", pos, out);
    }
}

static void orc_value(const Orc *o, const json_t *s, int types, int pos, OrcEnds *out) {
    if (json_is_false(s)) return;
    if (json_is_true(s) || !json_object_size(s)) {
        if (types & OT_NULL) orc_lit(o, "null", 4, pos, out);
        if (types & OT_BOOL) orc_lit(o, "true", 4, pos, out), orc_lit(o, "false", 5, pos, out);
        if (types & OT_NUMBER) orc_number(o, pos, 0, out);
        if (types & OT_STRING) orc_string(o, pos, 0, LONG_MAX, out);
        if (types & OT_ARRAY) orc_repeat(o, json_true(), NULL, 0, LONG_MAX, "[", "]", pos, out);
        if (types & OT_OBJECT) orc_repeat(o, NULL, json_true(), 0, LONG_MAX, "{", "}", pos, out);
        return;
    }
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        orc_value(o, json_pointer(o->root, json_string_value(v)), types, pos, out);
        return;
    }
    if ((v = json_object_get(s, "anyOf"))) {
        for (size_t i = 0; i < json_array_size(v); i++) orc_value(o, json_array_get(v, i), types, pos, out);
        return;
    }
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        int integer = 0, allowed = json_object_get(s, "type") ? orc_type_bits(json_object_get(s, "type"), &integer) : OT_ALL;
        for (size_t i = 0; i < (en ? json_array_size(en) : 1); i++) {
            const json_t *e = en ? json_array_get(en, i) : cn;
            int integral, t = orc_type_of(e, &integral);
            if (!(t & allowed & types) || (t == OT_NUMBER && integer && !integral)) continue;
            char *d = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);
            orc_lit(o, d, strlen(d), pos, out);
            free(d);
        }
        return;
    }
    if (json_object_get(s, "type")) {
        orc_typed(o, s, types, pos, out);
        return;
    }
    orc_any(o, types, pos, out); /* annotations only */
}

/* 1 when text[0..n) is a valid prefix of a value of schema (within document root, for $ref)
 * whose JSON type is among types; *complete: a whole value. */
static int orc_check_in(const json_t *root, const json_t *schema, int types, const uint8_t *text, int n, int *complete) {
    Orc o = {root, text, n};
    OrcEnds e = {0};
    orc_value(&o, schema, types, 0, &e);
    *complete = 0;
    for (int i = 0; i < e.n; i++)
        if (e.end[i] == n) *complete = 1;
    return e.eof || *complete;
}

static int orc_check(const json_t *schema, int types, const uint8_t *text, int n, int *complete) {
    return orc_check_in(schema, schema, types, text, n, complete);
}

#endif

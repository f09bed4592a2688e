#include "text/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shortest digits that round-trip, as "d.ddde+XX" parts: digits without the point, and decpt,
 * the position of the decimal point relative to the first digit (x = 0.digits * 10^decpt). */
static int shortest_digits(double x, char *digits, int *decpt) {
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    int nd = 0;
    char *e = strchr(tmp, 'e');
    for (char *c = tmp; c < e; c++)
        if (*c != '.') digits[nd++] = *c;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    *decpt = atoi(e + 1) + 1;
    return nd;
}

int pyjson_float_repr(double x, char *buf) {
    if (isnan(x)) return sprintf(buf, "NaN");
    if (isinf(x)) return sprintf(buf, x < 0 ? "-Infinity" : "Infinity");
    char digits[24];
    int decpt, o = 0;
    if (signbit(x)) buf[o++] = '-', x = -x;
    int nd = shortest_digits(x, digits, &decpt);
    if (decpt <= -4 || decpt > 16) { /* Python's repr switches to exponent form here */
        o += sprintf(buf + o, "%c", digits[0]);
        if (nd > 1) o += sprintf(buf + o, ".%s", digits + 1);
        return o + sprintf(buf + o, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
    if (decpt <= 0) return o + sprintf(buf + o, "0.%.*s%s", -decpt, "0000", digits);
    if (decpt >= nd) return o + sprintf(buf + o, "%s%.*s.0", digits, decpt - nd, "0000000000000000");
    return o + sprintf(buf + o, "%.*s.%s", decpt, digits, digits + decpt);
}

static void dump_string(const char *s, size_t n, StrBuf *out) {
    sb_add(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        char u[8];
        if (!esc && c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        if (esc) sb_adds(out, esc);
        else sb_add(out, &s[i], 1);
    }
    sb_add(out, "\"", 1);
}

static int by_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void dump_object(const json_t *v, PyJsonSeparators sep, int sort_keys, StrBuf *out) {
    size_t n = json_object_size(v), i = 0;
    const char **keys = df_malloc((n ? n : 1) * sizeof *keys);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) keys[i++] = key;
    if (sort_keys) qsort(keys, n, sizeof *keys, by_key); /* strcmp on UTF-8 = code point order */
    sb_add(out, "{", 1);
    for (i = 0; i < n; i++) {
        if (i) sb_adds(out, sep == PYJSON_COMPACT ? "," : ", ");
        dump_string(keys[i], strlen(keys[i]), out);
        sb_adds(out, sep == PYJSON_COMPACT ? ":" : ": ");
        pyjson_dump(json_object_get(v, keys[i]), sep, sort_keys, out);
    }
    sb_add(out, "}", 1);
    free(keys);
}

void pyjson_dump(const json_t *v, PyJsonSeparators sep, int sort_keys, StrBuf *out) {
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        dump_object(v, sep, sort_keys, out);
        break;
    case JSON_ARRAY:
        sb_add(out, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_adds(out, sep == PYJSON_COMPACT ? "," : ", ");
            pyjson_dump(json_array_get(v, i), sep, sort_keys, out);
        }
        sb_add(out, "]", 1);
        break;
    case JSON_STRING:
        dump_string(json_string_value(v), json_string_length(v), out);
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_adds(out, num);
        break;
    case JSON_REAL:
        pyjson_float_repr(json_real_value(v), num);
        sb_adds(out, num);
        break;
    case JSON_TRUE:
        sb_adds(out, "true");
        break;
    case JSON_FALSE:
        sb_adds(out, "false");
        break;
    case JSON_NULL:
        sb_adds(out, "null");
        break;
    }
}

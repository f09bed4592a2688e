#include "text/utf8.h"

#include <string.h>

/* Allowed range of the second byte for each lead byte (Unicode Table 3-7); later continuation
 * bytes are always 0x80..0xBF. need = total sequence length, 0 for bytes that never lead. */
typedef struct {
    uint8_t need, lo, hi;
} Lead;

static Lead lead_of(uint8_t b) {
    if (b < 0x80) return (Lead){1, 0, 0};
    if (b < 0xC2) return (Lead){0, 0, 0};
    if (b < 0xE0) return (Lead){2, 0x80, 0xBF};
    if (b == 0xE0) return (Lead){3, 0xA0, 0xBF};
    if (b == 0xED) return (Lead){3, 0x80, 0x9F};
    if (b < 0xF0) return (Lead){3, 0x80, 0xBF};
    if (b == 0xF0) return (Lead){4, 0x90, 0xBF};
    if (b < 0xF4) return (Lead){4, 0x80, 0xBF};
    if (b == 0xF4) return (Lead){4, 0x80, 0x8F};
    return (Lead){0, 0, 0};
}

Utf8Status utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *len) {
    Lead l = lead_of(s[0]);
    if (l.need == 1) {
        *cp = s[0], *len = 1;
        return UTF8_OK;
    }
    if (l.need == 0) {
        *cp = UTF8_REPLACEMENT, *len = 1;
        return UTF8_BAD;
    }
    uint32_t c = s[0] & (0x7F >> l.need);
    for (size_t i = 1; i < l.need; i++) {
        if (i == n) {
            *cp = UTF8_REPLACEMENT, *len = n;
            return UTF8_SHORT;
        }
        uint8_t lo = i == 1 ? l.lo : 0x80, hi = i == 1 ? l.hi : 0xBF;
        if (s[i] < lo || s[i] > hi) {
            *cp = UTF8_REPLACEMENT, *len = i; /* the subpart ends before the offending byte */
            return UTF8_BAD;
        }
        c = c << 6 | (s[i] & 0x3F);
    }
    *cp = c, *len = l.need;
    return UTF8_OK;
}

size_t utf8_valid_len(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII dominates real text: skip it eight bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i == n) break;
        uint32_t cp;
        size_t len;
        if (utf8_next(s + i, n - i, &cp, &len) != UTF8_OK) break;
        i += len;
    }
    return i;
}

size_t utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12), out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18), out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_sanitize(const uint8_t *s, size_t n, uint8_t *dst) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t ok = utf8_valid_len(s + i, n - i);
        if (dst) memcpy(dst + o, s + i, ok);
        i += ok, o += ok;
        if (i == n) break;
        uint32_t cp;
        size_t len;
        utf8_next(s + i, n - i, &cp, &len);
        uint8_t fffd[4];
        size_t k = utf8_encode(UTF8_REPLACEMENT, fffd);
        if (dst) memcpy(dst + o, fffd, k);
        o += k;
        i += len;
    }
    return o;
}

int utf8_is_pyspace(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t utf8_pystrip(const uint8_t *s, size_t n, size_t *start) {
    uint32_t cp;
    size_t b = 0, e = n, len;
    while (b < e && utf8_next(s + b, e - b, &cp, &len) == UTF8_OK && utf8_is_pyspace(cp)) b += len;
    while (e > b) {
        size_t c = e - 1;
        while (c > b && (s[c] & 0xC0) == 0x80) c--; /* back to the last character's first byte */
        if (utf8_next(s + c, e - c, &cp, &len) != UTF8_OK || !utf8_is_pyspace(cp)) break;
        e = c;
    }
    *start = b;
    return e - b;
}

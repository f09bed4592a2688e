/* The text primitives under the tokenizer: UTF-8 replacement (expected bytes from Python's
 * bytes.decode("utf-8", "replace")), the streaming decoder, Python's isspace set, base64 (RFC
 * 4648 test vectors) and K3's pre-split (hand-traced from Moonshot's algorithm). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/base64.h"
#include "text/chunk.h"
#include "text/utf8.h"
#include "text/utf8stream.h"

static size_t unhex(const char *h, uint8_t *out) {
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

/* input hex -> Python's replacement output hex */
static const char *const REPLACE_CASES[][2] = {
    {"61F18080E180C262806380BF64", "61efbfbdefbfbdefbfbd62efbfbd63efbfbdefbfbd64"}, /* Unicode's own example */
    {"C0AF", "efbfbdefbfbd"},
    {"E080AF", "efbfbdefbfbdefbfbd"},
    {"EDA080", "efbfbdefbfbdefbfbd"},
    {"F4908080", "efbfbdefbfbdefbfbdefbfbd"},
    {"E282", "efbfbd"},
    {"F09F98", "efbfbd"},
    {"F09F9880", "f09f9880"},
    {"FF", "efbfbd"},
    {"C3A9", "c3a9"},
    {"E282AC41", "e282ac41"},
};

static void sanitize_replaces_maximal_subparts_like_python(void) {
    for (size_t i = 0; i < sizeof REPLACE_CASES / sizeof REPLACE_CASES[0]; i++) {
        uint8_t in[64], want[128], got[192];
        size_t n = unhex(REPLACE_CASES[i][0], in), wn = unhex(REPLACE_CASES[i][1], want);
        size_t gn = utf8_sanitize(in, n, got);
        CHECK_MSG(gn == wn && memcmp(got, want, wn) == 0, "case %s", REPLACE_CASES[i][0]);
        CHECK(utf8_sanitize(in, n, NULL) == gn);
        CHECK((utf8_valid_len(in, n) == n) == (gn == n && memcmp(in, got, n) == 0));
    }
}

/* Feeding a byte string in random pieces gives exactly the one-shot replacement. */
static void stream_equals_one_shot_decoding_for_any_split(void) {
    srand(7);
    Utf8Stream st = UTF8STREAM_INIT;
    for (int trial = 0; trial < 2000; trial++) {
        uint8_t in[48], whole[160], streamed[160];
        size_t n = (size_t)(rand() % 48), sn = 0, len;
        for (size_t i = 0; i < n; i++) {
            int r = rand() % 6;
            in[i] = (uint8_t)(r == 0 ? 0x20 + rand() % 90 : r == 1 ? 0x80 + rand() % 64 : r == 2 ? 0xC0 + rand() % 32
                              : r == 3 ? 0xE0 + rand() % 16 : r == 4 ? 0xF0 + rand() % 16 : rand() % 256);
        }
        size_t wn = utf8_sanitize(in, n, whole);
        for (size_t i = 0; i < n;) {
            size_t k = 1 + (size_t)(rand() % 4);
            if (k > n - i) k = n - i;
            const char *t = utf8stream_push(&st, in + i, k, &len);
            CHECK(utf8_valid_len((const uint8_t *)t, len) == len); /* never emits a partial character */
            memcpy(streamed + sn, t, len), sn += len, i += k;
        }
        const char *t = utf8stream_finish(&st, &len);
        memcpy(streamed + sn, t, len), sn += len;
        CHECK_MSG(sn == wn && memcmp(streamed, whole, wn) == 0, "trial %d", trial);
    }
    utf8stream_free(&st);
}

static void stream_holds_a_split_character_until_complete(void) {
    Utf8Stream st = UTF8STREAM_INIT;
    size_t len;
    const uint8_t euro[] = {0xE2, 0x82, 0xAC};
    utf8stream_push(&st, euro, 1, &len);
    CHECK(len == 0);
    utf8stream_push(&st, euro + 1, 1, &len);
    CHECK(len == 0);
    const char *t = utf8stream_push(&st, euro + 2, 1, &len);
    CHECK(len == 3 && memcmp(t, euro, 3) == 0);
    utf8stream_free(&st);
}

/* The 29 code points of Python 3.11's [c for c in range(0x110000) if chr(c).isspace()]. */
static void pyspace_is_pythons_isspace(void) {
    static const uint32_t py[] = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                                  0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                  0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
    size_t k = 0, count = 0;
    for (uint32_t c = 0; c < 0x110000; c++) {
        int want = k < sizeof py / sizeof py[0] && py[k] == c;
        if (want) k++;
        count += (size_t)utf8_is_pyspace(c);
        CHECK_MSG(utf8_is_pyspace(c) == want, "U+%04X", c);
    }
    CHECK(count == 29);
}

static void pystrip_strips_unicode_space_not_continuation_bytes(void) {
    static const char *const cases[][2] = {
        {" \t\xc2\xa0" "abc\xe3\x80\x80\n", "abc"},
        {"\xc3\xa0", "\xc3\xa0"},                 /* a trailing byte 0xA0 is not U+00A0 */
        {"x\xe2\x84\x85", "x\xe2\x84\x85"},      /* nor 0x85 U+0085 */
        {"\x1c\x1f a b \xc2\x85", "a b"},
        {" \n\t\xe2\x80\xa8", ""},
    };
    for (int i = 0; i < 5; i++) {
        size_t start, n = utf8_pystrip((const uint8_t *)cases[i][0], strlen(cases[i][0]), &start);
        CHECK_MSG(n == strlen(cases[i][1]) && !memcmp(cases[i][0] + start, cases[i][1], n), "case %d", i);
    }
}

static void base64_matches_rfc4648_vectors(void) {
    static const char *const v[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                       {"foo", "Zm9v"},  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                       {"foobar", "Zm9vYmFy"}};
    for (int i = 0; i < 7; i++) {
        char enc[16];
        uint8_t dec[16];
        base64_encode((const uint8_t *)v[i][0], strlen(v[i][0]), enc);
        CHECK(!strcmp(enc, v[i][1]));
        long n = base64_decode(v[i][1], strlen(v[i][1]), dec);
        CHECK(n == (long)strlen(v[i][0]) && memcmp(dec, v[i][0], (size_t)n) == 0);
    }
    uint8_t d[16];
    CHECK(base64_decode("Zg=", 3, d) < 0);
    CHECK(base64_decode("Z=g=", 4, d) < 0);
    CHECK(base64_decode("Zg==Zg==", 8, d) < 0);
    CHECK(base64_decode("Z!==", 4, d) < 0);
}

/* Chunks as (start, len) pairs for a text, with the limits shrunk to make cuts visible. */
static int chunks(const char *s, size_t max_chars, size_t max_run, size_t *out) {
    ChunkIter it;
    chunk_iter_init(&it, (const uint8_t *)s, strlen(s));
    it.max_chars = max_chars, it.max_run = max_run;
    int n = 0;
    while (chunk_next(&it, &out[2 * n], &out[2 * n + 1])) n++;
    return n;
}

static void presplit_cuts_where_moonshots_algorithm_does(void) {
    size_t c[64];
    /* run limit 3: "aaaa" cuts before the 4th a; the count restarts at 1 there. */
    CHECK(chunks("aaaaaaa b", 100, 3, c) == 3);
    CHECK(c[0] == 0 && c[1] == 3 && c[2] == 3 && c[3] == 3 && c[4] == 6 && c[5] == 3);
    /* class changes reset the run: no cut */
    CHECK(chunks("aaa aaa   aaa", 100, 3, c) == 1);
    /* U+001C is a Python space: "a\x1ca\x1c" alternates and never cuts */
    CHECK(chunks("a\x1c" "a\x1c" "a\x1c" "a\x1c", 100, 2, c) == 1);
    /* 4 spaces of U+3000 (3 bytes each) with limit 2: cuts counted in characters */
    CHECK(chunks("\xe3\x80\x80\xe3\x80\x80\xe3\x80\x80\xe3\x80\x80", 100, 2, c) == 2);
    CHECK(c[1] == 6 && c[2] == 6);
    /* slices of 4 characters restart the run count: "aaaaaa" -> "aaaa" | "aa" */
    CHECK(chunks("aaaaaa", 4, 3, c) == 3);
    CHECK(c[1] == 3 && c[3] == 1 && c[4] == 4 && c[5] == 2);
    CHECK(chunks("", 4, 3, c) == 0);
}

int main(void) {
    RUN(sanitize_replaces_maximal_subparts_like_python);
    RUN(stream_equals_one_shot_decoding_for_any_split);
    RUN(stream_holds_a_split_character_until_complete);
    RUN(pyspace_is_pythons_isspace);
    RUN(pystrip_strips_unicode_space_not_continuation_bytes);
    RUN(base64_matches_rfc4648_vectors);
    RUN(presplit_cuts_where_moonshots_algorithm_does);
    return check_summary();
}

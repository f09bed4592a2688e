/* Encoding and decoding: the regex pieces of hand-traced strings, BPE against a plain
 * transcription of tiktoken's quadratic merge loop, merge order and ties on a hand-made
 * vocabulary, special tokens only in trusted text, and lossy decoding. (Bit-exact agreement
 * with tiktoken itself is tests/node/test_tokenizer_parity.mjs.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/base64.h"
#include "text/bpe.h"
#include "text/pretok.h"
#include "text/utf8.h"
#include "text/vocab_file.h"
#include "tokenizer_fixture.h"

/* Pieces of s joined with '|'. */
static void pieces(const Pretok *p, const char *s, char *out) {
    PretokIter it;
    CHECK(pretok_iter_init(&it, p) == 0);
    pretok_iter_set(&it, (const uint8_t *)s, strlen(s));
    size_t st, n;
    out[0] = 0;
    while (pretok_next(&it, &st, &n) == 1) {
        if (out[0]) strcat(out, "|");
        strncat(out, s + st, n);
    }
    pretok_iter_end(&it);
}

static void regex_pieces_follow_k3s_pattern(void) {
    static const char *const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"I'M here, don't WE'LL", "I'M| here|,| don't| WE'LL"},
        {"  x", " | x"},                    /* \s+(?!\S) leaves the last space to the word */
        {"x   ", "x|   "},                  /* trailing whitespace is one piece */
        {"a\n\n b", "a|\n\n| b"},
        {"a \t\n\t b", "a| \t\n|\t| b"},
        {"123456 7", "123|456| |7"},
        {"中文abc。", "中文|abc|。"},          /* 。 is not Han by Script, only by Script_Extensions */
        {"foo.bar();\n", "foo|.bar|();\n"},           /* the optional prefix takes the dot */
        {"CamelCase HTTPServer", "Camel|Case| HTTPServer"},
        {"\xc3\x89t\xc3\xa9 na\xc3\xafve", "\xc3\x89t\xc3\xa9| na\xc3\xafve"},
        {"x\xe1\xa0\x8e\xe1\xa0\x8ey", "x|\xe1\xa0\x8e\xe1\xa0\x8e|y"}, /* U+180E is not white space */
        {"\xe3\x80\x80\xe3\x80\x80x", "\xe3\x80\x80|\xe3\x80\x80x"},  /* U+3000 is */
    };
    Pretok *p = pretok_new();
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pieces(p, cases[i][0], got);
        CHECK_MSG(!strcmp(got, cases[i][1]), "'%s' -> '%s'", cases[i][0], got);
    }
    pretok_free(p);
}

/* tiktoken's byte_pair_merge as written there: rescan every pair after each merge. */
static size_t reference_bpe(const RankMap *m, const uint8_t *s, size_t n, int32_t *out) {
    size_t start[4096 + 1], parts = n;
    for (size_t i = 0; i <= n; i++) start[i] = i;
    for (;;) {
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 2 <= parts; i++) {
            int32_t r = rankmap_get(m, s + start[i], start[i + 2] - start[i]);
            if (r >= 0 && r < best) best = r, at = i;
        }
        if (best == INT32_MAX) break;
        memmove(&start[at + 1], &start[at + 2], (parts - at - 1) * sizeof *start);
        parts--;
    }
    for (size_t i = 0; i < parts; i++) out[i] = rankmap_get(m, s + start[i], start[i + 1] - start[i]);
    return parts;
}

static void bpe_equals_the_quadratic_reference(void) {
    const char *dir;
    Tokenizer *t = fixture_synth(8192, &dir);
    RankMap m;
    rankmap_init(&m);
    int32_t byte_rank[256];
    char path[512];
    snprintf(path, sizeof path, "%.400s/tiktoken.model", dir);
    CHECK(vocab_read_ranks(path, &m, byte_rank) == 0);
    static const char *const bits[] = {"th", "e", " ", "ing", "a", "aa", "\xe4\xb8\xad", "\xe6\x96\x87", "0", "\n",
                                       "tion", "er", "\xc3\xa9", "s", "'", "{", "}", "  ", "re", "\xf0\x9f\x98\x80"};
    BpeScratch scratch = {0};
    srand(3);
    for (int trial = 0; trial < 3000; trial++) {
        uint8_t piece[4096];
        size_t n = 0, target = trial < 2950 ? 1 + (size_t)(rand() % 60) : 3000;
        while (n < target) {
            const char *b = bits[rand() % 20];
            size_t l = strlen(b);
            if (n + l > sizeof piece) break;
            memcpy(piece + n, b, l), n += l;
        }
        TokIds got = {0};
        int32_t want[4096];
        bpe_encode(&m, byte_rank, piece, n, &scratch, &got);
        size_t wn = reference_bpe(&m, piece, n, want);
        CHECK_MSG(got.n == wn && memcmp(got.v, want, wn * sizeof *want) == 0, "trial %d (%zu bytes)", trial, n);
        tokids_free(&got);
    }
    bpe_scratch_free(&scratch);
    rankmap_free(&m);
    tok_free(t);
}

/* bytes, then "aa" 256, "bc" 257, "ab" 258, "aaa" 259 */
static Tokenizer *hand_vocab(void) {
    const char *dir = fixture_dir();
    char text[256 * 16 + 128], *p = text;
    for (int b = 0; b < 256; b++) {
        char b64[8];
        base64_encode(&(uint8_t){(uint8_t)b}, 1, b64);
        p += sprintf(p, "%s %d\n", b64, b);
    }
    strcpy(p, "YWE= 256\nYmM= 257\nYWI= 258\nYWFh 259\n");
    fixture_write(dir, "tiktoken.model", text);
    fixture_write(dir, "tokenizer_config.json", "{\"added_tokens_decoder\": {\"263\": {\"content\": \"<|open|>\"}}}");
    Tokenizer *t = tok_load(dir);
    CHECK(t != NULL);
    return t;
}

static int ids_are(const Tokenizer *t, const char *s, int trusted, const int32_t *want, size_t n) {
    TokIds ids = fixture_encode(t, s, trusted);
    int ok = ids.n == n && memcmp(ids.v, want, n * sizeof *want) == 0;
    if (!ok) {
        fprintf(stderr, "  '%s' ->", s);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.v[i]);
        fputc('\n', stderr);
    }
    tokids_free(&ids);
    return ok;
}

static void merges_go_lowest_rank_first_and_leftmost_on_ties(void) {
    Tokenizer *t = hand_vocab();
    CHECK(ids_are(t, "abc", 0, (int32_t[]){'a', 257}, 2));          /* bc (257) beats ab (258) */
    CHECK(ids_are(t, "aaaa", 0, (int32_t[]){256, 256}, 2));         /* leftmost aa first, then aa */
    CHECK(ids_are(t, "aaaaa", 0, (int32_t[]){256, 259}, 2));         /* aa, then aa+a = aaa (259) */
    CHECK(ids_are(t, "aaa", 0, (int32_t[]){259}, 1));               /* a whole-piece token wins outright */
    CHECK(ids_are(t, "aab", 0, (int32_t[]){256, 'b'}, 2));
    tok_free(t);
}

static void specials_only_in_trusted_text(void) {
    Tokenizer *t = hand_vocab();
    CHECK(tok_special_id(t, "<|open|>") == 263);
    CHECK(ids_are(t, "x<|open|>y", 1, (int32_t[]){'x', 263, 'y'}, 3));
    TokIds ids = fixture_encode(t, "x<|open|>y", 0);
    CHECK(ids.n > 3);
    for (size_t i = 0; i < ids.n; i++) CHECK(ids.v[i] < 260);
    tokids_free(&ids);
    CHECK(ids_are(t, "<|open|><|open|", 1, (int32_t[]){263, '<', '|', 'o', 'p', 'e', 'n', '|'}, 8));
    tok_free(t);
}

static void decoding_is_lossy_like_tiktoken(void) {
    Tokenizer *t = hand_vocab();
    size_t len;
    char *s = tok_decode(t, (int32_t[]){'a', 0xE2, 0x82, 'b', 263, 0xFF}, 6, &len);
    CHECK(s && len == 16 && !memcmp(s, "a\xef\xbf\xbd" "b<|open|>\xef\xbf\xbd", 16));
    free(s);
    CHECK(tok_decode(t, (int32_t[]){'a', 516}, 2, &len) == NULL);
    CHECK(strstr(df_errmsg(), "token id 516 at position 1 is outside the vocabulary (0..515)") != NULL);
    size_t n;
    CHECK(tok_token_bytes(t, -1, &n) == NULL && tok_token_bytes(t, 516, &n) == NULL);
    CHECK(tok_is_special(t, 260) && !tok_is_special(t, 259));
    tok_free(t);
}

static void invalid_input_encodes_as_its_replacement(void) {
    Tokenizer *t = fixture_synth(2000, NULL);
    TokIds a = fixture_encode(t, "ab\xff\xe2\x82 cd", 0), b = fixture_encode(t, "ab\xef\xbf\xbd\xef\xbf\xbd cd", 0);
    CHECK(a.n == b.n && memcmp(a.v, b.v, a.n * sizeof *a.v) == 0);
    tokids_free(&a), tokids_free(&b);
    tok_free(t);
}

static void decode_inverts_encode_on_valid_utf8(void) {
    Tokenizer *t = fixture_synth(3000, NULL);
    static const char *const alphabet[] = {"a", "Z", " ", "\n", "\t", "'s", "1", ".", "\xc3\xa9", "\xe4\xb8\xad",
                                           "\xf0\x9f\x91\x8d", "\xe2\x80\x8d", "\xcc\x81", "\xe3\x80\x80", "<|open|>"};
    srand(5);
    for (int trial = 0; trial < 500; trial++) {
        char s[1024] = "";
        int n = rand() % 60;
        for (int i = 0; i < n; i++) strcat(s, alphabet[rand() % 15]);
        TokIds ids = fixture_encode(t, s, trial & 1);
        size_t len;
        char *back = tok_decode(t, ids.v, ids.n, &len);
        CHECK_MSG(back && len == strlen(s) && !strcmp(back, s), "'%s'", s);
        free(back);
        tokids_free(&ids);
    }
    tok_free(t);
}

/* Any bytes: encoding never fails, and decoding gives the input with invalid UTF-8 replaced. */
static void arbitrary_bytes_round_trip_to_their_replacement(void) {
    Tokenizer *t = fixture_synth(1500, NULL);
    srand(9);
    for (int trial = 0; trial < 1000; trial++) {
        uint8_t in[200], want[600];
        size_t n = (size_t)(rand() % 200);
        for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(rand() % 4 ? rand() % 256 : "ab \n\xe4\xb8\xad"[rand() % 6]);
        size_t wn = utf8_sanitize(in, n, want);
        TokIds ids = {0};
        CHECK(tok_encode(t, (const char *)in, n, trial & 1, &ids) == 0);
        size_t len;
        char *back = tok_decode(t, ids.v, ids.n, &len);
        CHECK_MSG(back && len == wn && !memcmp(back, want, wn), "trial %d", trial);
        free(back);
        tokids_free(&ids);
    }
    tok_free(t);
}

int main(void) {
    RUN(regex_pieces_follow_k3s_pattern);
    RUN(bpe_equals_the_quadratic_reference);
    RUN(merges_go_lowest_rank_first_and_leftmost_on_ties);
    RUN(specials_only_in_trusted_text);
    RUN(decoding_is_lossy_like_tiktoken);
    RUN(invalid_input_encodes_as_its_replacement);
    RUN(decode_inverts_encode_on_valid_utf8);
    RUN(arbitrary_bytes_round_trip_to_their_replacement);
    fixture_cleanup();
    return check_summary();
}

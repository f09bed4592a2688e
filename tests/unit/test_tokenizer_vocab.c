/* The synthetic vocabulary writer and the validating loader: file formats, K3's special ids,
 * determinism, learned merges, and one clear error per kind of broken file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text/base64.h"
#include "tokenizer_fixture.h"
#include "util/fileio.h"

static char *slurp(const char *dir, const char *name, size_t *len) {
    char path[512], *text;
    snprintf(path, sizeof path, "%.400s/%s", dir, name);
    if (file_read_all(path, 64u << 20, &text, len)) return NULL;
    return text;
}

static void synthetic_files_have_k3s_format_and_specials(void) {
    const char *dir;
    Tokenizer *t = fixture_synth(1000, &dir);
    CHECK(tok_n_mergeable(t) == 1000 && tok_vocab_size(t) == 1256);
    CHECK(tok_special_id(t, "[BOS]") == 1000);
    CHECK(tok_special_id(t, "<|end_of_msg|>") == 1002);
    CHECK(tok_special_id(t, "<|open|>") == 1003 && tok_special_id(t, "<|close|>") == 1004);
    CHECK(tok_special_id(t, "<|sep|>") == 1005 && tok_special_id(t, "[EOT]") == 1009);
    CHECK(tok_special_id(t, "<|media_pad|>") == 1021 && tok_special_id(t, "<osagent_mode>") == 1065);
    CHECK(tok_special_id(t, "[UNK]") == 1254 && tok_special_id(t, "[PAD]") == 1255);
    CHECK(tok_special_id(t, "<|reserved_token_1008|>") == 1008);
    CHECK(tok_special_id(t, "<|im_start|>") == -1);
    size_t len;
    char *ranks = slurp(dir, "tiktoken.model", &len);
    /* ranks 0..255 are the single bytes in byte order: "AA==" is byte 0, "/w==" byte 255 */
    CHECK(ranks && !strncmp(ranks, "AA== 0\nAQ== 1\n", 14));
    CHECK(strstr(ranks, "\n/w== 255\n") != NULL);
    CHECK(ranks[len - 1] == '\n' && !strcmp(strrchr(ranks, ' '), " 999\n"));
    free(ranks);
    char *config = slurp(dir, "tokenizer_config.json", &len);
    CHECK(config && strstr(config, "\"eos_token\": \"<|end_of_msg|>\"") && strstr(config, "\"bos_token\": \"[BOS]\""));
    CHECK(strstr(config, "\"1255\": {\n      \"content\": \"[PAD]\"") != NULL);
    free(config);
    tok_free(t);
}

/* Merges are learned from the corpus: frequent English pieces become single tokens. */
static void learned_merges_make_common_words_single_tokens(void) {
    Tokenizer *t = fixture_synth(4096, NULL);
    const char *words[] = {" the", " and", "ing", " of", "\n\n", "    "};
    for (int i = 0; i < 6; i++) {
        TokIds ids = fixture_encode(t, words[i], 0);
        CHECK_MSG(ids.n == 1 && ids.v[0] >= 256, "'%s' -> %zu ids", words[i], ids.n);
        tokids_free(&ids);
    }
    TokIds ids = fixture_encode(t, "The quick brown fox jumps over the lazy dog.", 0);
    CHECK(ids.n < 20); /* 44 bytes */
    tokids_free(&ids);
    tok_free(t);
}

static void same_request_writes_byte_identical_files_whatever_the_seed(void) {
    const char *a = fixture_dir(), *b = fixture_dir();
    CHECK(vocab_write_synthetic(a, 3000, 1) == 0 && vocab_write_synthetic(b, 3000, 99) == 0);
    const char *names[] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        size_t la, lb;
        char *x = slurp(a, names[i], &la), *y = slurp(b, names[i], &lb);
        CHECK(x && y && la == lb && memcmp(x, y, la) == 0);
        free(x), free(y);
    }
}

/* Sizes from a few hundred to K3's full width; past the corpus, compound tokens fill in. */
static void every_size_loads_and_round_trips(void) {
    const int sizes[] = {256, 300, 8192, 163584};
    for (int i = 0; i < 4; i++) {
        Tokenizer *t = fixture_synth(sizes[i], NULL);
        CHECK(tok_n_mergeable(t) == sizes[i]);
        const char *s = "Hello, world! 你好，世界。 Ωμέγα 12345 \t\n";
        TokIds ids = fixture_encode(t, s, 0);
        size_t len;
        char *back = tok_decode(t, ids.v, ids.n, &len);
        CHECK(back && len == strlen(s) && !strcmp(back, s));
        free(back);
        tokids_free(&ids);
        tok_free(t);
    }
    CHECK(vocab_write_synthetic(fixture_dir(), 255, 1) == -1);
    CHECK(strstr(df_errmsg(), "need 256..") != NULL);
}

/* A directory with the single bytes (but skip_byte) as ranks 0.., the given extra lines, and a
 * config (none when NULL). */
static const char *files(int skip_byte, const char *extra_ranks, const char *config) {
    const char *dir = fixture_dir();
    char *ranks = malloc(256 * 16 + strlen(extra_ranks) + 1), *p = ranks;
    for (int b = 0, r = 0; b < 256; b++) {
        char b64[8];
        if (b == skip_byte) continue;
        base64_encode(&(uint8_t){(uint8_t)b}, 1, b64);
        p += sprintf(p, "%s %d\n", b64, r++);
    }
    strcpy(p, extra_ranks);
    fixture_write(dir, "tiktoken.model", ranks);
    free(ranks);
    if (config) fixture_write(dir, "tokenizer_config.json", config);
    return dir;
}

static const char *broken(const char *extra_ranks, const char *config) { return files(-1, extra_ranks, config); }

#define OK_CONFIG "{\"added_tokens_decoder\": {\"258\": {\"content\": \"<|end_of_msg|>\"}}}"

static void expect_load_error(const char *dir, const char *needle) {
    Tokenizer *t = tok_load(dir);
    CHECK_MSG(!t && strstr(df_errmsg(), needle), "wanted '%s', got '%s'", needle, df_errmsg());
    tok_free(t);
}

static void broken_files_fail_with_file_and_line(void) {
    Tokenizer *t = tok_load(broken("YWI= 256\n", OK_CONFIG));
    CHECK(t && tok_special_id(t, "<|end_of_msg|>") == 258 && tok_special_id(t, "<|reserved_token_257|>") == 257);
    tok_free(t);
    expect_load_error(broken("YWI= 257\n", OK_CONFIG), "tiktoken.model:257: rank 257, expected 256");
    expect_load_error(broken("YQ== 256\n", OK_CONFIG), "tiktoken.model:257: token duplicates the token of rank 97");
    expect_load_error(broken("YW!= 256\n", OK_CONFIG), "tiktoken.model:257: 'YW!=' is not padded RFC 4648 base64");
    expect_load_error(broken("YWI=256\n", OK_CONFIG), "tiktoken.model:257: expected '<base64 bytes> <rank>'");
    expect_load_error(broken("YWI= 25x\n", OK_CONFIG), "tiktoken.model:257: rank '25x' is not a decimal number");
    expect_load_error(broken("YWI= 256\n\n", OK_CONFIG), "tiktoken.model:258:");
    expect_load_error(broken("", NULL), "tokenizer_config.json: cannot open");
    expect_load_error(broken("", "{\"added_tokens_decoder\": 3}"), "added_tokens_decoder: missing or not an object");
    expect_load_error(broken("", "{\"added_tokens_decoder\": {\"12\": {\"content\": \"x\"}}}"),
                      "id 12 is outside the special range 256..511");
    expect_load_error(broken("", "{\"added_tokens_decoder\": {\"0300\": {\"content\": \"x\"}}}"), "is not a token id");
    expect_load_error(broken("", "{\"added_tokens_decoder\": {\"300\": {\"content\": \"\"}}}"), "\"300\".content");
    expect_load_error(broken("", "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<|reserved_token_301|>\"}}}"),
                      "special tokens 300 and 301 are both spelled");
    expect_load_error(broken("", "{\"added_tokens_decoder\": {"), "tokenizer_config.json:1: invalid JSON");
    expect_load_error(files(0x41, "", OK_CONFIG), "the single byte 0x41 is not a token");
}

int main(void) {
    RUN(synthetic_files_have_k3s_format_and_specials);
    RUN(learned_merges_make_common_words_single_tokens);
    RUN(same_request_writes_byte_identical_files_whatever_the_seed);
    RUN(every_size_loads_and_round_trips);
    RUN(broken_files_fail_with_file_and_line);
    fixture_cleanup();
    return check_summary();
}

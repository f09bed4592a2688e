#include "text/vocab_file.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/base64.h"
#include "text/utf8.h"
#include "util/err.h"
#include "util/fileio.h"

/* One "<base64> <rank>" line; its rank must be the next id. */
static int parse_rank_line(const char *path, size_t line, const char *s, size_t n, RankMap *m,
                           uint8_t *tok, int32_t byte_rank[256]) {
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
        return df_fail("%s:%zu: expected '<base64 bytes> <rank>' with one space", path, line);
    size_t b64_len = (size_t)(sp - s), rank_len = n - b64_len - 1;
    if (b64_len == 0 || b64_len > VOCAB_MAX_TOKEN_BYTES / 3 * 4)
        return df_fail("%s:%zu: token is empty or longer than %d bytes", path, line, VOCAB_MAX_TOKEN_BYTES);
    long len = base64_decode(s, b64_len, tok);
    if (len <= 0) return df_fail("%s:%zu: '%.*s' is not padded RFC 4648 base64", path, line, (int)b64_len, s);
    long long rank = 0;
    for (size_t i = 0; i < rank_len; i++) {
        char c = sp[1 + i];
        if (c < '0' || c > '9' || i >= 10)
            return df_fail("%s:%zu: rank '%.*s' is not a decimal number", path, line, (int)rank_len, sp + 1);
        rank = rank * 10 + (c - '0');
    }
    if (rank_len == 0) return df_fail("%s:%zu: missing rank after the space", path, line);
    if (rank != (long long)m->n)
        return df_fail("%s:%zu: rank %lld, expected %u (ranks must be 0, 1, 2, ... in line order)", path, line,
                       rank, m->n);
    int32_t dup;
    if (rankmap_add(m, tok, (size_t)len, &dup) < 0)
        return df_fail("%s:%zu: token duplicates the token of rank %d", path, line, dup);
    if (len == 1) byte_rank[tok[0]] = (int32_t)rank;
    return 0;
}

int vocab_parse_ranks(const char *text, size_t n, const char *path, RankMap *m, int32_t byte_rank[256]) {
    uint8_t *tok = df_malloc(VOCAB_MAX_TOKEN_BYTES);
    for (int b = 0; b < 256; b++) byte_rank[b] = -1;
    int rc = 0;
    size_t line = 0;
    for (size_t p = 0; p < n && !rc;) {
        const char *nl = memchr(text + p, '\n', n - p);
        size_t e = nl ? (size_t)(nl - text) : n;
        rc = parse_rank_line(path, ++line, text + p, e - p, m, tok, byte_rank);
        p = e + 1;
    }
    for (int b = 0; b < 256 && !rc; b++)
        if (byte_rank[b] < 0) rc = df_fail("%s: the single byte 0x%02X is not a token (all 256 must be)", path, b);
    free(tok);
    return rc;
}

int vocab_read_ranks(const char *path, RankMap *m, int32_t byte_rank[256]) {
    char *text;
    size_t n;
    if (file_read_all(path, VOCAB_MAX_FILE_BYTES, &text, &n)) return -1;
    int rc = vocab_parse_ranks(text, n, path, m, byte_rank);
    free(text);
    return rc;
}

/* Decimal id without sign or leading zeros, within the special range. */
static int special_key(const char *path, const char *key, int32_t first_id, int *index) {
    size_t len = strlen(key);
    int digits = len > 0 && len <= 10 && (key[0] != '0' || len == 1);
    for (size_t i = 0; digits && i < len; i++) digits = key[i] >= '0' && key[i] <= '9';
    if (!digits) return df_fail("%s: added_tokens_decoder: key \"%s\" is not a token id", path, key);
    long long id = strtoll(key, NULL, 10);
    if (id < first_id || id >= (long long)first_id + TOK_N_SPECIAL)
        return df_fail("%s: added_tokens_decoder: id %lld is outside the special range %d..%d", path, id,
                       first_id, first_id + TOK_N_SPECIAL - 1);
    *index = (int)(id - first_id);
    return 0;
}

static int special_content(const char *path, const char *key, json_t *entry, char **out) {
    json_t *c = json_is_object(entry) ? json_object_get(entry, "content") : NULL;
    if (!json_is_string(c))
        return df_fail("%s: added_tokens_decoder.\"%s\".content: missing or not a string", path, key);
    const char *s = json_string_value(c);
    size_t len = json_string_length(c);
    if (len == 0 || len > VOCAB_MAX_SPECIAL_BYTES || strlen(s) != len)
        return df_fail("%s: added_tokens_decoder.\"%s\".content: must be 1..%d bytes without NUL", path, key,
                       VOCAB_MAX_SPECIAL_BYTES);
    *out = df_strdup(s);
    return 0;
}

static int read_decoder(const char *path, json_t *dec, int32_t first_id, char *spell[TOK_N_SPECIAL]) {
    const char *key;
    json_t *entry;
    json_object_foreach(dec, key, entry) {
        int i = 0;
        if (special_key(path, key, first_id, &i) || special_content(path, key, entry, &spell[i])) return -1;
    }
    for (int i = 0; i < TOK_N_SPECIAL; i++) {
        if (spell[i]) continue;
        char buf[48];
        snprintf(buf, sizeof buf, "<|reserved_token_%d|>", first_id + i);
        spell[i] = df_strdup(buf);
    }
    for (int i = 0; i < TOK_N_SPECIAL; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(spell[i], spell[j]))
                return df_fail("%s: special tokens %d and %d are both spelled \"%s\"", path, first_id + j,
                               first_id + i, spell[i]);
    return 0;
}

int vocab_parse_specials(const char *text, size_t n, const char *path, int32_t first_id, char *spell[TOK_N_SPECIAL]) {
    memset(spell, 0, TOK_N_SPECIAL * sizeof *spell);
    json_error_t e;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &e);
    if (!root) return df_fail("%s:%d: invalid JSON: %s", path, e.line, e.text);
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    int rc;
    if (!json_is_object(root)) rc = df_fail("%s: the top level is not a JSON object", path);
    else if (!json_is_object(dec)) rc = df_fail("%s: added_tokens_decoder: missing or not an object", path);
    else rc = read_decoder(path, dec, first_id, spell);
    json_decref(root);
    return rc;
}

int vocab_read_specials(const char *path, int32_t first_id, char *spell[TOK_N_SPECIAL]) {
    memset(spell, 0, TOK_N_SPECIAL * sizeof *spell);
    char *text;
    size_t n;
    if (file_read_all(path, VOCAB_MAX_CONFIG_BYTES, &text, &n)) return -1;
    int rc = vocab_parse_specials(text, n, path, first_id, spell);
    free(text);
    return rc;
}

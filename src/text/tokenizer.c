#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/chunk.h"
#include "text/pretok.h"
#include "text/rankmap.h"
#include "text/special.h"
#include "text/utf8.h"
#include "text/vocab_file.h"
#include "util/fileio.h"

struct Tokenizer {
    RankMap ranks; /* ids 0 .. n_mergeable-1 */
    int32_t byte_rank[256];
    SpecialSet special;
    Pretok *pretok;
};

Tokenizer *tok_parse(const char *ranks, size_t ranks_len, const char *ranks_label, const char *config,
                     size_t config_len, const char *config_label) {
    Tokenizer *t = df_calloc(1, sizeof *t);
    rankmap_init(&t->ranks);
    char *spell[TOK_N_SPECIAL] = {0};
    int rc = vocab_parse_ranks(ranks, ranks_len, ranks_label, &t->ranks, t->byte_rank);
    if (!rc) rc = vocab_parse_specials(config, config_len, config_label, (int32_t)t->ranks.n, spell);
    if (!rc) special_init(&t->special, (int32_t)t->ranks.n, spell); /* takes the strings */
    else
        for (int i = 0; i < TOK_N_SPECIAL; i++) free(spell[i]);
    if (!rc && !(t->pretok = pretok_new())) rc = -1;
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

Tokenizer *tok_load(const char *model_dir) {
    char *ranks_path = path_join(model_dir, "tiktoken.model");
    char *config_path = path_join(model_dir, "tokenizer_config.json");
    char *ranks = NULL, *config = NULL;
    size_t ranks_len, config_len;
    Tokenizer *t = NULL;
    if (!file_read_all(ranks_path, VOCAB_MAX_FILE_BYTES, &ranks, &ranks_len) &&
        !file_read_all(config_path, VOCAB_MAX_CONFIG_BYTES, &config, &config_len))
        t = tok_parse(ranks, ranks_len, ranks_path, config, config_len, config_path);
    free(ranks), free(config), free(ranks_path), free(config_path);
    return t;
}

Tokenizer *tok_load_checked(const char *model_dir, int vocab) {
    Tokenizer *t = tok_load(model_dir);
    if (t && tok_vocab_size(t) != vocab) {
        df_fail("%s: the tokenizer has %d ids but config.json says vocab_size %d", model_dir, tok_vocab_size(t), vocab);
        tok_free(t);
        return NULL;
    }
    return t;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    rankmap_free(&t->ranks);
    special_free(&t->special);
    pretok_free(t->pretok);
    free(t);
}

int tok_n_mergeable(const Tokenizer *t) { return (int)t->ranks.n; }
int tok_vocab_size(const Tokenizer *t) { return (int)t->ranks.n + TOK_N_SPECIAL; }

int32_t tok_special_id(const Tokenizer *t, const char *spelling) {
    return special_lookup(&t->special, spelling, strlen(spelling));
}

int tok_is_special(const Tokenizer *t, int32_t id) {
    return id >= (int32_t)t->ranks.n && id < (int32_t)t->ranks.n + TOK_N_SPECIAL;
}

const uint8_t *tok_token_bytes(const Tokenizer *t, int32_t id, size_t *len) {
    if (id >= 0 && (uint32_t)id < t->ranks.n) return rankmap_bytes(&t->ranks, (uint32_t)id, len);
    if (!tok_is_special(t, id)) return NULL;
    int i = id - (int32_t)t->ranks.n;
    *len = t->special.len[i];
    return (const uint8_t *)t->special.spell[i];
}

/* --- encoding --- */

typedef struct {
    const Tokenizer *t;
    PretokIter it;
    BpeScratch bpe;
    TokIds *out;
} Encoder;

/* Regex pieces, each emitted whole when it is a token and through BPE otherwise. */
static int encode_ordinary(Encoder *e, const uint8_t *s, size_t n) {
    pretok_iter_set(&e->it, s, n);
    size_t start, len;
    int rc;
    while ((rc = pretok_next(&e->it, &start, &len)) == 1) {
        int32_t r = rankmap_get(&e->t->ranks, s + start, len);
        if (r >= 0) tokids_push(e->out, r);
        else bpe_encode(&e->t->ranks, e->t->byte_rank, s + start, len, &e->bpe, e->out);
    }
    return rc;
}

static int encode_trusted(Encoder *e, const uint8_t *s, size_t n) {
    while (n > 0) {
        int32_t id;
        size_t len, at = special_find(&e->t->special, s, n, &id, &len);
        if (at > 0 && encode_ordinary(e, s, at)) return -1;
        if (at == n) break;
        tokids_push(e->out, id);
        s += at + len, n -= at + len;
    }
    return 0;
}

int tok_encode(const Tokenizer *t, const char *text, size_t len, int trusted, TokIds *out) {
    const uint8_t *s = (const uint8_t *)text;
    uint8_t *clean = NULL;
    if (utf8_valid_len(s, len) < len) {
        size_t n = utf8_sanitize(s, len, NULL);
        clean = df_malloc(n);
        len = utf8_sanitize(s, len, clean);
        s = clean;
    }
    Encoder e = {.t = t, .out = out};
    if (pretok_iter_init(&e.it, t->pretok)) return free(clean), -1;
    ChunkIter ci;
    chunk_iter_init(&ci, s, len);
    size_t start, n;
    int rc = 0;
    while (!rc && chunk_next(&ci, &start, &n))
        rc = trusted ? encode_trusted(&e, s + start, n) : encode_ordinary(&e, s + start, n);
    pretok_iter_end(&e.it);
    bpe_scratch_free(&e.bpe);
    free(clean);
    return rc;
}

/* --- decoding --- */

char *tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *out_len) {
    size_t total = 0, len;
    for (size_t i = 0; i < n; i++) {
        if (!tok_token_bytes(t, ids[i], &len)) {
            df_fail("token id %d at position %zu is outside the vocabulary (0..%d)", ids[i], i,
                    tok_vocab_size(t) - 1);
            return NULL;
        }
        total += len;
    }
    uint8_t *raw = df_malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = tok_token_bytes(t, ids[i], &len);
        memcpy(raw + o, b, len);
        o += len;
    }
    if (utf8_valid_len(raw, total) < total) {
        uint8_t *clean = df_malloc(utf8_sanitize(raw, total, NULL) + 1);
        total = utf8_sanitize(raw, total, clean);
        free(raw);
        raw = clean;
    }
    raw[total] = 0;
    if (out_len) *out_len = total;
    return (char *)raw;
}

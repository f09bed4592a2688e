#include "cli/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/err.h"
#include "util/fileio.h"

#define DEFAULT_CONTEXT 8192

static int context_from_env(int *out) {
    const char *v = getenv("K3_CONTEXT");
    *out = DEFAULT_CONTEXT;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < 1 || n > (1 << 24)) return df_fail("K3_CONTEXT: '%s' is not a position count in 1..16777216", v);
    *out = (int)n;
    return 0;
}

int engine_open(Engine *e, const char *dir) {
    memset(e, 0, sizeof *e);
    if (!dir) dir = getenv("DELTAFIN_ROOT");
    if (!dir || !*dir) dir = ".";
    if (model_a_log_mode_from_env(&e->a_log) || context_from_env(&e->max_context)) return -1;
    if (catalog_open(&e->cat, dir)) return -1;
    if (mapped_open(&e->store, &e->cat)) return catalog_free(&e->cat), -1;
    e->pool = pool_create(pool_threads_from_env());
    e->threads = pool_threads(e->pool);
    if (model_create(&e->model, &e->cat, mapped_tensor_bytes, &e->store, &e->store.src, e->pool, e->a_log, e->max_context)) {
        engine_close(e);
        return -1;
    }
    e->max_context = model_max_context(e->model);
    return 0;
}

void engine_close(Engine *e) {
    model_destroy(e->model);
    if (e->pool) pool_destroy(e->pool);
    if (e->store.base) mapped_close(&e->store);
    if (e->cat.dir) catalog_free(&e->cat);
    memset(e, 0, sizeof *e);
}

void engine_print_settings(const Engine *e, FILE *f) {
    const K3Config *c = &e->cat.cfg;
    fprintf(f, "deltafin: model %s (%d layers, %d experts, top-%d) | device cpu (%s kernels) | threads %d | "
               "spine bf16 (exact) | experts local %d/%d (mapped) | context %d | A_log %s | fp32 greedy\n",
            e->cat.dir, c->n_layers, c->n_experts, c->top_k, kern_isa(), e->threads,
            (c->n_layers - c->first_dense) * c->n_experts, (c->n_layers - c->first_dense) * c->n_experts, e->max_context,
            e->a_log == ALOG_PER_HEAD ? "per-head" : "per-channel (compatibility mode)");
}

Tokenizer *engine_tokenizer(const Engine *e) {
    Tokenizer *tok = tok_load(e->cat.dir);
    if (tok && tok_vocab_size(tok) != e->cat.cfg.vocab) {
        df_fail("%s: the tokenizer has %d ids but config.json says vocab_size %d", e->cat.dir, tok_vocab_size(tok),
                e->cat.cfg.vocab);
        tok_free(tok);
        return NULL;
    }
    return tok;
}

int engine_encode_text(const Engine *e, const Tokenizer *tok, const char *text, size_t len, int **ids) {
    TokIds out = {0};
    if (tok_encode(tok, text, len, 0, &out)) return tokids_free(&out), -1;
    if (out.n == 0) return tokids_free(&out), df_fail("the text encodes to no tokens");
    if (out.n > (size_t)e->max_context) {
        tokids_free(&out);
        return df_fail("the text is %zu tokens, more than the context limit %d (K3_CONTEXT)", out.n, e->max_context);
    }
    *ids = df_malloc(sizeof **ids * out.n);
    for (size_t i = 0; i < out.n; i++) (*ids)[i] = out.v[i];
    int n = (int)out.n;
    tokids_free(&out);
    return n;
}

int parse_token_list(const char *text, int *ids, int max, int vocab) {
    int n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= vocab)
            return df_fail("token list: '%.20s' is not a token id in 0..%d", p, vocab - 1);
        if (n >= max) return df_fail("token list: more than %d tokens", max);
        ids[n++] = (int)v;
        p = end;
    }
    if (n == 0) return df_fail("token list is empty");
    return n;
}

int read_token_file(const char *path, int **ids, int vocab) {
    char *text;
    size_t len;
    if (file_read_all(path, 256u << 20, &text, &len)) return -1;
    int max = (int)(len / 2 + 1);
    *ids = df_malloc(sizeof **ids * (size_t)max);
    int n = parse_token_list(text, *ids, max, vocab);
    free(text);
    if (n < 0) {
        free(*ids);
        return df_failctx("%s", path);
    }
    return n;
}

int engine_prefill(Engine *e, State *st, const int *tokens, int n, int chunk, float *rows, float *last) {
    const int V = e->cat.cfg.vocab;
    if (chunk < 1 || chunk > MODEL_MAX_CHUNK) return df_fail("chunk size %d outside 1..%d", chunk, MODEL_MAX_CHUNK);
    for (int at = 0; at < n; at += chunk) {
        int T = n - at < chunk ? n - at : chunk;
        int final = at + T == n;
        float *out = rows ? rows + (size_t)at * V : (final ? last : NULL);
        if (model_forward(e->model, st, tokens + at, T, out, rows != NULL)) return -1;
        if (rows && final && last) memcpy(last, rows + (size_t)(n - 1) * V, sizeof(float) * (size_t)V);
    }
    return 0;
}

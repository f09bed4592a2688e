/* state.c - one sequence's decode state in host memory: per KDA layer the conv windows and
 * recurrent matrices (fixed size, one array), per MLA layer the latent or expanded key/value cache
 * (grows with the sequence). The device's copy (devmem.c) is synchronised before the host reads the
 * arrays (state_to_host) and after it writes them (state_host_changed). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"
#include "util/err.h"

static size_t latent_floats(const K3Config *c) { return latent_width(c); }

uint64_t state_bytes(const K3Config *c, MlaCacheMode mla, int positions) {
    uint64_t kda = sizeof(float) * (uint64_t)kda_floats(c);
    uint64_t per_position = mla == MLA_CACHE_LATENT ? latent_floats(c) : key_floats(c) + value_floats(c);
    return sizeof(State) + sizeof(LayerState) * (uint64_t)c->n_layers + kda * (uint64_t)c->n_kda_layers +
           sizeof(float) * per_position * (uint64_t)c->n_mla_layers * (uint64_t)positions;
}

uint64_t state_verify_bytes(const K3Config *c) {
    return sizeof(float) * (uint64_t)record_floats(c) * (uint64_t)c->n_kda_layers;
}

State *state_create(const Model *m) {
    const K3Config *c = &m->cfg;
    State *s = df_calloc(1, sizeof *s);
    s->model = m;
    s->layers = df_calloc((size_t)c->n_layers, sizeof *s->layers);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_KDA) continue;
        s->layers[l].kda = df_calloc(kda_floats(c), sizeof(float));
    }
    return s;
}

void state_destroy(State *s) {
    if (!s) return;
    devmem_state_free(s);
    for (int l = 0; l < s->model->cfg.n_layers; l++) {
        LayerState *L = &s->layers[l];
        free(L->kda), free(L->keys), free(L->values), free(L->latent);
    }
    free(s->layers);
    free(s);
}

void state_reset(State *s) {
    const K3Config *c = &s->model->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        LayerState *L = &s->layers[l];
        if (L->kda) memset(L->kda, 0, kda_floats(c) * sizeof(float));
    }
    s->len = 0;
    s->verify_rows = 0;
    s->dev_newer = 0; /* the device's copy is not read back: the reset state is all zeros */
    state_host_changed(s);
}

int state_length(const State *s) { return s->len; }

int state_reserve(State *s, int need) {
    const K3Config *c = &s->model->cfg;
    if (need <= s->cap) return 0;
    if (need > s->model->max_context)
        return df_fail("context is full: %d positions requested, the limit is %d (K3_CONTEXT)", need, s->model->max_context);
    int cap = s->cap ? s->cap : 16;
    while (cap < need) cap = cap + cap / 2 + 1;
    if (cap > s->model->max_context) cap = s->model->max_context;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] != LAYER_MLA) continue;
        LayerState *L = &s->layers[l];
        if (s->model->mla_cache == MLA_CACHE_LATENT) {
            L->latent = df_realloc(L->latent, sizeof(float) * latent_floats(c) * (size_t)cap);
            continue;
        }
        L->keys = df_realloc(L->keys, sizeof(float) * key_floats(c) * (size_t)cap);
        L->values = df_realloc(L->values, sizeof(float) * value_floats(c) * (size_t)cap);
    }
    s->cap = cap;
    return 0;
}

/* Copies rows [from, n) of an MLA cache array of `per` floats per row. */
static void copy_rows(float *dst, const float *src, size_t per, int from, int n) {
    if (n > from) memcpy(dst + per * (size_t)from, src + per * (size_t)from, per * (size_t)(n - from) * sizeof(float));
}

int state_copy_from(State *dst, const State *src, int same) {
    const K3Config *c = &src->model->cfg;
    /* (reading a State brings its arrays up from the device: logically const) */
    if (state_to_host((State *)src) || state_to_host(dst) || state_reserve(dst, src->len)) return -1;
    state_host_changed(dst);
    if (same > dst->len) same = dst->len;
    if (same > src->len) same = src->len;
    if (same < 0) same = 0;
    for (int l = 0; l < c->n_layers; l++) {
        LayerState *d = &dst->layers[l];
        const LayerState *s = &src->layers[l];
        if (s->kda) memcpy(d->kda, s->kda, kda_floats(c) * sizeof(float));
        if (s->keys) {
            copy_rows(d->keys, s->keys, key_floats(c), same, src->len);
            copy_rows(d->values, s->values, value_floats(c), same, src->len);
        }
        if (s->latent) copy_rows(d->latent, s->latent, latent_floats(c), same, src->len);
    }
    dst->len = src->len;
    dst->verify_rows = 0;
    return 0;
}

int state_copy(State *dst, const State *src) { return state_copy_from(dst, src, 0); }

static int floats_equal(const float *x, const float *y, size_t n) { return n == 0 || !memcmp(x, y, n * sizeof *x); }

int state_equal(const State *a, const State *b) {
    const K3Config *c = &a->model->cfg;
    const size_t n = (size_t)a->len;
    if (a->len != b->len || state_to_host((State *)a) || state_to_host((State *)b)) return 0;
    for (int l = 0; l < c->n_layers; l++) {
        const LayerState *x = &a->layers[l], *y = &b->layers[l];
        int same = c->layer_kind[l] == LAYER_KDA
                       ? floats_equal(x->kda, y->kda, kda_floats(c))
                   : a->model->mla_cache == MLA_CACHE_LATENT
                       ? floats_equal(x->latent, y->latent, latent_floats(c) * n)
                       : floats_equal(x->keys, y->keys, key_floats(c) * n) && floats_equal(x->values, y->values, value_floats(c) * n);
        if (!same) return 0;
    }
    return 1;
}

void state_commit(State *s, int n) {
    int T = s->verify_rows;
    s->verify_rows = 0;
    if (T == 0 || n >= T) return;
    if (n < 1) n = 1;
    kda_commit(s, n); /* the replay records are with the device's copy */
    s->len -= T - n;  /* MLA rows past the kept prefix are simply abandoned */
}

/* One layer's arrays in the order state_save writes them, with their float counts for len
 * positions; returns how many (at most 2). */
static int layer_arrays(const State *s, int l, int len, float **arr, size_t *n) {
    const K3Config *c = &s->model->cfg;
    LayerState *L = &s->layers[l];
    if (c->layer_kind[l] == LAYER_KDA) {
        arr[0] = L->kda, n[0] = kda_floats(c);
        return 1;
    }
    if (s->model->mla_cache == MLA_CACHE_LATENT) {
        arr[0] = L->latent, n[0] = latent_floats(c) * (size_t)len;
        return 1;
    }
    arr[0] = L->keys, n[0] = key_floats(c) * (size_t)len;
    arr[1] = L->values, n[1] = value_floats(c) * (size_t)len;
    return 2;
}

uint64_t state_saved_bytes(const Model *m, int len) {
    const K3Config *c = &m->cfg;
    uint64_t per_position = m->mla_cache == MLA_CACHE_LATENT ? latent_floats(c) : key_floats(c) + value_floats(c);
    return sizeof(float) * ((uint64_t)kda_floats(c) * (uint64_t)c->n_kda_layers +
                            per_position * (uint64_t)c->n_mla_layers * (uint64_t)len);
}

int state_save(const State *s, int (*put)(void *ctx, const void *p, size_t n), void *ctx) {
    if (s->verify_rows) return df_fail("state_save: a verification is pending");
    if (state_to_host((State *)s)) return -1;
    for (int l = 0; l < s->model->cfg.n_layers; l++) {
        float *arr[2];
        size_t n[2];
        int k = layer_arrays(s, l, s->len, arr, n);
        for (int i = 0; i < k; i++)
            if (n[i] && put(ctx, arr[i], n[i] * sizeof(float))) return -1;
    }
    return 0;
}

int state_load(State *s, int len, int (*get)(void *ctx, void *p, size_t n), void *ctx) {
    state_reset(s);
    if (len < 0 || state_reserve(s, len)) return len < 0 ? df_fail("state_load: %d positions", len) : -1;
    for (int l = 0; l < s->model->cfg.n_layers; l++) {
        float *arr[2];
        size_t n[2];
        int k = layer_arrays(s, l, len, arr, n);
        for (int i = 0; i < k; i++) {
            if (n[i] && get(ctx, arr[i], n[i] * sizeof(float))) return state_reset(s), -1;
            for (size_t j = 0; j < n[i]; j++)
                if (!isfinite(arr[i][j])) {
                    state_reset(s);
                    return df_fail("layer %d: a saved state value is not a finite number", l);
                }
        }
    }
    s->len = len;
    return 0;
}

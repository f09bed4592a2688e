/* catalog_check.c - catalog_build: merges shard headers into one sorted inventory and checks it
 * against the schema derived from the config, then locates every routed expert's span. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/catalog.h"
#include "format/schema.h"
#include "util/err.h"
#include "util/fileio.h"

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const TensorInfo *)a)->name, ((const TensorInfo *)b)->name);
}

const TensorInfo *catalog_find(const Catalog *cat, const char *name) {
    TensorInfo key = {.name = (char *)name};
    return bsearch(&key, cat->tensors, (size_t)cat->n_tensors, sizeof key, cmp_name);
}

char *catalog_shard_path(const Catalog *cat, int shard) { return path_join(cat->dir, cat->shards[shard].file); }

static const char *shard_of(const Catalog *cat, const TensorInfo *t) { return cat->shards[t->shard].file; }

static int shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    int at = snprintf(buf, len, "[");
    for (int i = 0; i < ndim; i++) at += snprintf(buf + at, len - (size_t)at, i ? ", %lld" : "%lld", (long long)shape[i]);
    return snprintf(buf + at, len - (size_t)at, "]");
}

/* Finds an expected tensor and checks its dtype and shape; marks it used. */
static const TensorInfo *expect(const Catalog *cat, const SchemaEntry *e, uint8_t *used) {
    const TensorInfo *t = catalog_find(cat, e->name);
    if (!t) {
        df_fail("%s: tensor %s is missing", cat->dir, e->name);
        return NULL;
    }
    int same = t->dtype == e->dtype && t->ndim == e->ndim;
    for (int i = 0; same && i < e->ndim; i++) same = t->shape[i] == e->shape[i];
    if (!same) {
        char got[96], want[96];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(want, sizeof want, e->ndim, e->shape);
        df_fail("%s: tensor %s is %s %s, the config requires %s %s", shard_of(cat, t), e->name, dtype_name(t->dtype), got,
                dtype_name(e->dtype), want);
        return NULL;
    }
    used[t - cat->tensors] = 1;
    return t;
}

/* A_log may be stored longer than num_heads (padding); learn its length from the first KDA layer. */
static int learn_a_log_len(Catalog *cat) {
    for (int l = 0; l < cat->cfg.n_layers; l++) {
        if (cat->cfg.layer_kind[l] != LAYER_KDA) continue;
        char name[SCHEMA_NAME_MAX];
        schema_tensor_name(name, TENSOR_KDA_A_LOG, l);
        const TensorInfo *t = catalog_find(cat, name);
        if (!t) return df_fail("%s: tensor %s is missing", cat->dir, name);
        if (t->ndim != 1 || t->shape[0] < cat->cfg.kda_heads)
            return df_fail("%s: tensor %s must be a vector of at least num_heads = %d entries", shard_of(cat, t), name,
                           cat->cfg.kda_heads);
        cat->cfg.a_log_len = (int)t->shape[0];
        return 0;
    }
    return 0;
}

static int check_spine(Catalog *cat, uint8_t *used) {
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    int n = schema_globals(&cat->cfg, e);
    for (int l = -1; l < cat->cfg.n_layers; l++) {
        if (l >= 0) n = schema_layer(&cat->cfg, l, e);
        for (int i = 0; i < n; i++) {
            const TensorInfo *t = expect(cat, &e[i], used);
            if (!t) return -1;
            if (e[i].role == ROLE_EMBED) cat->embed_bytes += t->nbytes;
            else cat->spine_bytes += t->nbytes;
        }
    }
    return 0;
}

/* The six parts of one expert must follow each other in one shard. */
static int locate_expert(Catalog *cat, int layer, int expert, uint8_t *used) {
    SchemaEntry e[6];
    schema_expert(&cat->cfg, layer, expert, e);
    const TensorInfo *first = NULL;
    uint64_t at = 0;
    for (int i = 0; i < 6; i++) {
        const TensorInfo *t = expect(cat, &e[i], used);
        if (!t) return -1;
        if (!first) first = t, at = t->offset;
        if (t->shard != first->shard)
            return df_fail("%s: expert %d of layer %d is split across shards (%s is in %s)", cat->dir, expert, layer,
                           e[i].name, shard_of(cat, t));
        if (t->offset != at)
            return df_fail("%s: expert %d of layer %d is not contiguous: %s starts at byte %llu, expected %llu "
                           "(order must be w1.packed, w1.scale, w2.packed, w2.scale, w3.packed, w3.scale)",
                           shard_of(cat, t), expert, layer, e[i].name, (unsigned long long)t->offset, (unsigned long long)at);
        at += t->nbytes;
    }
    *(ExpertSpan *)catalog_expert(cat, layer, expert) = (ExpertSpan){first->shard, first->offset};
    return 0;
}

static void set_expert_layout(Catalog *cat) {
    SchemaEntry e[6];
    schema_expert(&cat->cfg, 0, 0, e);
    uint64_t off[7] = {0};
    for (int i = 0; i < 6; i++) off[i + 1] = off[i] + schema_nbytes(&e[i]);
    cat->expert_layout = (ExpertLayout){off[0], off[1], off[2], off[3], off[4], off[5]};
    cat->expert_bytes = off[6];
}

static int check_experts(Catalog *cat, uint8_t *used) {
    const K3Config *c = &cat->cfg;
    cat->experts = df_malloc(sizeof *cat->experts * (size_t)c->n_layers * (size_t)c->n_experts);
    for (size_t i = 0; i < (size_t)c->n_layers * (size_t)c->n_experts; i++) cat->experts[i] = (ExpertSpan){-1, 0};
    set_expert_layout(cat);
    for (int l = c->first_dense; l < c->n_layers; l++)
        for (int e = 0; e < c->n_experts; e++)
            if (locate_expert(cat, l, e, used)) return -1;
    return 0;
}

static int is_skipped(const char *name) {
    return !strncmp(name, "vision_tower.", 13) || !strncmp(name, "mm_projector.", 13);
}

static int check_leftovers(Catalog *cat, const uint8_t *used) {
    for (int i = 0; i < cat->n_tensors; i++) {
        if (used[i]) continue;
        if (!is_skipped(cat->tensors[i].name))
            return df_fail("%s: unexpected tensor %s (not part of the architecture config.json describes)",
                           shard_of(cat, &cat->tensors[i]), cat->tensors[i].name);
        cat->n_skipped++;
    }
    return 0;
}

static int merge_headers(Catalog *cat, StHeader *headers, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)headers[i].n;
    cat->tensors = df_malloc(sizeof *cat->tensors * (total ? total : 1));
    for (int i = 0; i < n; i++) {
        memcpy(cat->tensors + cat->n_tensors, headers[i].t, sizeof *cat->tensors * (size_t)headers[i].n);
        cat->n_tensors += headers[i].n;
        free(headers[i].t);
        headers[i].t = NULL, headers[i].n = 0;
    }
    qsort(cat->tensors, total, sizeof *cat->tensors, cmp_name);
    for (size_t i = 1; i < total; i++)
        if (!strcmp(cat->tensors[i].name, cat->tensors[i - 1].name))
            return df_fail("%s: tensor %s appears in both %s and %s", cat->dir, cat->tensors[i].name,
                           shard_of(cat, &cat->tensors[i - 1]), shard_of(cat, &cat->tensors[i]));
    return 0;
}

int catalog_build(Catalog *cat, const char *dir, const K3Config *cfg, StHeader *headers, char *const *files, int n) {
    memset(cat, 0, sizeof *cat);
    cat->dir = df_strdup(dir);
    cat->cfg = *cfg;
    cat->n_shards = n;
    cat->shards = df_calloc((size_t)n, sizeof *cat->shards);
    for (int i = 0; i < n; i++)
        cat->shards[i] = (ShardRef){df_strdup(files[i]), headers[i].data_start + headers[i].data_size, headers[i].data_start};
    int rc = merge_headers(cat, headers, n);
    uint8_t *used = df_calloc((size_t)cat->n_tensors + 1, 1);
    if (!rc) rc = learn_a_log_len(cat);
    if (!rc) rc = check_spine(cat, used);
    if (!rc) rc = check_experts(cat, used);
    if (!rc) rc = check_leftovers(cat, used);
    free(used);
    if (rc) catalog_free(cat);
    return rc;
}

void catalog_free(Catalog *cat) {
    for (int i = 0; i < cat->n_tensors; i++) free(cat->tensors[i].name);
    for (int i = 0; i < cat->n_shards; i++) free(cat->shards[i].file);
    free(cat->tensors);
    free(cat->shards);
    free(cat->experts);
    free(cat->dir);
    memset(cat, 0, sizeof *cat);
}

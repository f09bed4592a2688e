/* writer.c - lays a synthetic checkpoint out as Hugging Face shards.
 *
 * Physical order: the embedding, then layer by layer (the layer's non-expert tensors, then its
 * experts in name order - experts.0, experts.1, experts.10, ... - so expert ids are not in
 * physical order, as in real safetensors files), then the output globals. A layer never straddles
 * two shards; a new shard starts once the current one reaches the preset's target size. Each file
 * is written to NAME.tmp and renamed when complete. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/catalog.h"
#include "format/schema.h"
#include "synth/fill.h"
#include "synth/synth.h"
#include "synth/vocab_synth.h"
#include "util/bulkwrite.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fileio.h"

typedef struct {
    SchemaEntry *e;   /* every tensor in physical order */
    int *shard;       /* shard index (0-based) of each */
    int n, cap, n_shards;
    uint64_t total;
} Plan;

static void plan_add(Plan *p, const SchemaEntry *e) {
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 1024;
        p->e = df_realloc(p->e, sizeof *p->e * (size_t)p->cap);
        p->shard = df_realloc(p->shard, sizeof *p->shard * (size_t)p->cap);
    }
    p->e[p->n++] = *e;
    p->total += schema_nbytes(e);
}

static int cmp_id_as_text(const void *a, const void *b) {
    char x[16], y[16];
    snprintf(x, sizeof x, "%d", *(const int *)a);
    snprintf(y, sizeof y, "%d", *(const int *)b);
    return strcmp(x, y);
}

static void plan_layer(Plan *p, const K3Config *c, int l) {
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    int n = schema_layer(c, l, e);
    for (int i = 0; i < n; i++) plan_add(p, &e[i]);
    if (!config_is_moe(c, l)) return;
    int *ids = df_malloc(sizeof *ids * (size_t)c->n_experts);
    for (int i = 0; i < c->n_experts; i++) ids[i] = i;
    qsort(ids, (size_t)c->n_experts, sizeof *ids, cmp_id_as_text);
    for (int i = 0; i < c->n_experts; i++) {
        schema_expert(c, l, ids[i], e);
        for (int k = 0; k < 6; k++) plan_add(p, &e[k]);
    }
    free(ids);
}

/* Groups (embedding, each layer, output globals) are assigned whole to shards. */
static void plan_build(Plan *p, const SynthPreset *sp) {
    const K3Config *c = &sp->cfg;
    SchemaEntry g[8];
    int ng = schema_globals(c, g);
    int shard = 0, group_start;
    uint64_t in_shard = 0;
    for (int grp = -1; grp <= c->n_layers; grp++) {
        group_start = p->n;
        if (grp == -1) plan_add(p, &g[0]);
        else if (grp == c->n_layers)
            for (int i = 1; i < ng; i++) plan_add(p, &g[i]);
        else plan_layer(p, c, grp);
        if (in_shard >= sp->shard_target) shard++, in_shard = 0;
        for (int i = group_start; i < p->n; i++) p->shard[i] = shard, in_shard += schema_nbytes(&p->e[i]);
    }
    p->n_shards = shard + 1;
}

typedef struct {
    uint64_t done, total;
    double t0, last;
    int on;
} Progress;

static void progress_tick(Progress *pr, uint64_t add, int final) {
    pr->done += add;
    double t = df_now();
    if (!pr->on || (!final && t - pr->last < (isatty(2) ? 1.0 : 10.0))) return;
    pr->last = t;
    double rate = pr->done / (t - pr->t0 + 1e-9);
    fprintf(stderr, "synth: %.2f / %.2f GB written, %.0f MB/s, %.0f s left\n", pr->done / 1e9, pr->total / 1e9,
            rate / 1e6, rate > 0 ? (double)(pr->total - pr->done) / rate : 0.0);
}

/* Generates tensor e chunk by chunk straight into the writer's buffer; a chunk that does not
 * fit in what is left of the buffer goes through `spill` (SYNTH_CHUNK_ELEMS * 4 bytes). */
static int write_tensor(BulkWriter *w, const SynthPreset *sp, const SchemaEntry *e, uint64_t seed, uint8_t *spill,
                        Progress *pr) {
    size_t esize = dtype_size(e->dtype);
    uint64_t elems = schema_nbytes(e) / esize;
    for (uint64_t first = 0; first < elems;) {
        uint64_t count = elems - first < SYNTH_CHUNK_ELEMS ? elems - first : SYNTH_CHUNK_ELEMS;
        size_t bytes = (size_t)(count * esize), avail;
        uint8_t *dst = bulk_reserve(w, &avail);
        synth_fill(&sp->cfg, e, seed, sp->embed_scale, first, count, bytes <= avail ? dst : spill);
        if (bytes <= avail ? bulk_commit(w, bytes) : bulk_write(w, spill, bytes)) return -1;
        first += count;
        progress_tick(pr, bytes, 0);
    }
    return 0;
}

static int write_shard(const Plan *p, const SynthPreset *sp, int shard, uint64_t seed, const char *dir, uint8_t *spill,
                       Progress *pr) {
    int first = 0, n = 0;
    while (p->shard[first] != shard) first++;
    while (first + n < p->n && p->shard[first + n] == shard) n++;
    TensorInfo *t = df_calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        const SchemaEntry *e = &p->e[first + i];
        t[i] = (TensorInfo){.name = (char *)e->name, .dtype = e->dtype, .ndim = e->ndim, .nbytes = schema_nbytes(e)};
        memcpy(t[i].shape, e->shape, sizeof e->shape);
    }
    size_t hlen;
    char *header = st_build_header(t, n, &hlen);
    free(t);
    if (!header) return -1;
    char name[64];
    catalog_shard_name(name, sizeof name, shard + 1, p->n_shards);
    char *path = path_join(dir, name);
    BulkWriter w;
    int rc = bulk_open(&w, path);
    if (!rc) {
        rc = bulk_write(&w, header, hlen);
        for (int i = 0; i < n && !rc; i++) rc = write_tensor(&w, sp, &p->e[first + i], seed, spill, pr);
        if (bulk_close(&w) && !rc) rc = -1;
    }
    free(header), free(path);
    return rc;
}

static int write_text(const char *dir, const char *name, const char *text) {
    char *path = path_join(dir, name);
    int rc = file_write_atomic(path, text, strlen(text));
    free(path);
    return rc;
}

static int write_index(const Plan *p, const char *dir) {
    json_t *map = json_object();
    for (int i = 0; i < p->n; i++) {
        char name[64];
        catalog_shard_name(name, sizeof name, p->shard[i] + 1, p->n_shards);
        json_object_set_new(map, p->e[i].name, json_string(name));
    }
    json_t *root = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)p->total, "weight_map", map);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    int rc = write_text(dir, "model.safetensors.index.json", text);
    free(text);
    return rc;
}

static int write_metadata(const SynthPreset *sp, uint64_t seed, const char *dir) {
    char *cfg = synth_config_json(&sp->cfg);
    if (!cfg) return -1;
    int rc = write_text(dir, "config.json", cfg);
    free(cfg);
    char gen[160];
    snprintf(gen, sizeof gen, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"do_sample\": false\n}\n",
             sp->cfg.bos_id, sp->cfg.eos_id);
    if (!rc) rc = write_text(dir, "generation_config.json", gen);
    if (!rc) rc = vocab_write_synthetic(dir, sp->cfg.vocab - 256, seed);
    return rc;
}

int synth_write(const SynthPreset *sp, uint64_t seed, const char *dir, int progress) {
    if (file_mkdirs(dir)) return -1;
    Plan p = {0};
    plan_build(&p, sp);
    Progress pr = {0, p.total, df_now(), df_now(), progress};
    uint8_t *spill = df_malloc(SYNTH_CHUNK_ELEMS * 4);
    int rc = write_metadata(sp, seed, dir);
    for (int s = 0; s < p.n_shards && !rc; s++) rc = write_shard(&p, sp, s, seed, dir, spill, &pr);
    if (!rc) rc = write_index(&p, dir);
    if (!rc) progress_tick(&pr, 0, 1);
    free(spill), free(p.e), free(p.shard);
    return rc;
}

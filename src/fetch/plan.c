/* plan.c - which byte ranges an install still lacks, as fetch jobs of bounded size. */
#include <stdlib.h>
#include <string.h>

#include "fetch/installer_int.h"
#include "util/err.h"

void plan_free(FetchPlan *p) {
    free(p->job);
    memset(p, 0, sizeof *p);
}

void plan_add(Installer *in, FetchPlan *p, int file, uint64_t begin, uint64_t end) {
    uint64_t chunk = in->has_source ? in->src.chunk_bytes : 64u << 20;
    for (uint64_t at = begin; at < end;) {
        uint64_t stop = end - at > chunk ? at + chunk : end;
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 64;
            p->job = df_realloc(p->job, sizeof *p->job * (size_t)p->cap);
        }
        p->job[p->n++] = (FetchJob){file, at, stop};
        p->bytes += stop - at;
        at = stop;
    }
}

/* Adds the missing parts of a sorted, merged wanted-range list of one shard. Adjacent missing
 * pieces were merged by ranges_insert, so neighbouring experts become one request. */
static void add_missing(Installer *in, FetchPlan *p, int s, const Range *want, int n_want) {
    if (in->unmanaged) return;
    int e = in->shard_entry[s];
    Range *miss = NULL;
    int n = 0, cap = 0;
    for (int k = 0; k < n_want; k++) manifest_missing(&in->man, e, want[k].begin, want[k].end, &miss, &n, &cap);
    for (int k = 0; k < n; k++) plan_add(in, p, e, miss[k].begin, miss[k].end);
    free(miss);
}

static int is_expert_tensor(const char *name) { return strstr(name, ".block_sparse_moe.experts.") != NULL; }

void plan_headers_and_spine(Installer *in, FetchPlan *p) {
    const Catalog *c = in->cat;
    for (int s = 0; s < c->n_shards; s++) {
        Range *want = NULL;
        int n = 0, cap = 0;
        ranges_insert(&want, &n, &cap, 0, c->shards[s].data_start);
        for (int t = 0; t < c->n_tensors; t++) {
            const TensorInfo *ti = &c->tensors[t];
            if (ti->shard == s && !is_expert_tensor(ti->name)) ranges_insert(&want, &n, &cap, ti->offset, ti->offset + ti->nbytes);
        }
        add_missing(in, p, s, want, n);
        free(want);
    }
}

void plan_everything(Installer *in, FetchPlan *p) {
    for (int s = 0; s < in->cat->n_shards; s++) {
        Range whole = {0, in->cat->shards[s].size};
        add_missing(in, p, s, &whole, 1);
    }
}

/* Expert spans of one shard chosen by pick(layer, expert), as a merged range list. */
static void plan_expert_set(Installer *in, FetchPlan *p, const uint8_t *chosen) {
    const Catalog *c = in->cat;
    const int E = c->cfg.n_experts;
    for (int s = 0; s < c->n_shards; s++) {
        Range *want = NULL;
        int n = 0, cap = 0;
        for (int l = c->cfg.first_dense; l < c->cfg.n_layers; l++)
            for (int x = 0; x < E; x++) {
                const ExpertSpan *sp = catalog_expert(c, l, x);
                if (chosen[(size_t)l * E + x] && sp->shard == s) ranges_insert(&want, &n, &cap, sp->offset, sp->offset + c->expert_bytes);
            }
        add_missing(in, p, s, want, n);
        free(want);
    }
}

void plan_layers(Installer *in, const uint8_t *want, FetchPlan *p) {
    const K3Config *cfg = &in->cat->cfg;
    uint8_t *chosen = df_calloc((size_t)cfg->n_layers * cfg->n_experts, 1);
    for (int l = cfg->first_dense; l < cfg->n_layers; l++)
        if (want[l]) memset(chosen + (size_t)l * cfg->n_experts, 1, (size_t)cfg->n_experts);
    plan_expert_set(in, p, chosen);
    free(chosen);
}

void plan_experts(Installer *in, const int *layer, const int *expert, int n, FetchPlan *p) {
    const Catalog *c = in->cat;
    for (int k = 0; k < n; k++) {
        const ExpertSpan *sp = catalog_expert(c, layer[k], expert[k]);
        if (sp->shard < 0) continue;
        Range r = {sp->offset, sp->offset + c->expert_bytes};
        add_missing(in, p, sp->shard, &r, 1);
    }
}

void installer_totals(Installer *in, uint64_t *full, uint64_t *present) {
    *full = *present = 0;
    for (int s = 0; s < in->cat->n_shards; s++) {
        *full += in->cat->shards[s].size;
        *present += in->unmanaged ? in->cat->shards[s].size : manifest_present_bytes(&in->man, in->shard_entry[s]);
    }
}

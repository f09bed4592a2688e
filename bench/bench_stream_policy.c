/* bench_stream_policy - replays router traces (K3_TRACE files) through the expert cache's
 * eviction policies and prints the hit rate of each at several cache sizes.
 *
 *   build/bench/bench_stream_policy TRACE.jsonl [--experts N]
 *
 * Cache sizes are fractions of the traced expert population (MoE layers x experts). The replay
 * uses the shipped CacheIndex, processing each position's layers in order and holding a layer's
 * experts while it is served, as the store does. The first half of the trace warms the cache; hit
 * rates are counted over the second half. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/cache_index.h"

typedef struct {
    int n_pos, n_layers, k;
    int *ids;          /* [pos][layer][k], -1 where a layer is absent */
} Trace;

static int load(Trace *t, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return perror(path), -1;
    char *line = NULL;
    size_t cap = 0;
    int max_pos = 0;
    memset(t, 0, sizeof *t);
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL), *layers = j ? json_object_get(j, "layers") : NULL;
        if (!json_is_object(layers)) return fprintf(stderr, "%s: line %d is not a trace line\n", path, t->n_pos + 1), -1;
        const char *key;
        json_t *v;
        if (t->n_pos == max_pos) {
            max_pos = max_pos ? 2 * max_pos : 1024;
            t->ids = realloc(t->ids, sizeof(int) * (size_t)max_pos * 1024 * 16);
            memset(t->ids + (size_t)t->n_pos * 1024 * 16, 0xff, sizeof(int) * (size_t)(max_pos - t->n_pos) * 1024 * 16);
        }
        json_object_foreach(layers, key, v) {
            int l = atoi(key), k = (int)json_array_size(v);
            if (l < 0 || l >= 1024 || k < 1 || k > 16) return fprintf(stderr, "%s: layer %s out of range\n", path, key), -1;
            t->n_layers = l + 1 > t->n_layers ? l + 1 : t->n_layers;
            t->k = k;
            for (int i = 0; i < k; i++) t->ids[((size_t)t->n_pos * 1024 + l) * 16 + i] = (int)json_integer_value(json_array_get(v, i));
        }
        json_decref(j);
        t->n_pos++;
    }
    free(line);
    fclose(f);
    return t->n_pos > 1 ? 0 : (fprintf(stderr, "%s: fewer than 2 positions\n", path), -1);
}

static double replay(const Trace *t, int n_experts, CachePolicy policy, int slots) {
    CacheIndex ci;
    cidx_init(&ci, policy, slots, t->n_layers * n_experts);
    long hits = 0, needs = 0;
    int held[16];
    for (int p = 0; p < t->n_pos; p++)
        for (int l = 0; l < t->n_layers; l++) {
            const int *ids = t->ids + ((size_t)p * 1024 + l) * 16;
            if (ids[0] < 0) continue;
            int n_held = 0;
            for (int i = 0; i < t->k; i++) {
                int key = l * n_experts + ids[i], s = cidx_lookup(&ci, key);
                if (p >= t->n_pos / 2) needs++, hits += s >= 0;
                if (s < 0 && (s = cidx_victim(&ci)) >= 0) cidx_assign(&ci, s, key);
                cidx_use(&ci, key, s);
                if (s >= 0) ci.locked[s] = 1, held[n_held++] = s;
            }
            for (int i = 0; i < n_held; i++) ci.locked[held[i]] = 0;
        }
    cidx_free(&ci);
    return needs ? (double)hits / (double)needs : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s TRACE.jsonl [--experts N]\n", argv[0]), 2;
    Trace t;
    if (load(&t, argv[1])) return 1;
    int n_experts = 0, moe_layers = 0;
    for (int l = 0; l < t.n_layers; l++) {
        int seen = 0;
        for (int p = 0; p < t.n_pos; p++)
            for (int i = 0; i < t.k; i++) {
                int e = t.ids[((size_t)p * 1024 + l) * 16 + i];
                n_experts = e + 1 > n_experts ? e + 1 : n_experts;
                seen |= e >= 0;
            }
        moe_layers += seen;
    }
    if (argc >= 4 && !strcmp(argv[2], "--experts")) n_experts = atoi(argv[3]);
    printf("trace %s: %d positions, %d MoE layers, top-%d of %d experts\n", argv[1], t.n_pos, moe_layers, t.k, n_experts);
    printf("%-10s %-8s %8s %8s\n", "cache", "slots", "lru", "lfu");
    const double fractions[] = {0.02, 0.05, 0.10, 0.25, 0.50};
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        int slots = (int)(fractions[f] * moe_layers * n_experts);
        if (slots < 2 * t.k) slots = 2 * t.k;
        printf("%8.0f%% %8d %7.1f%% %7.1f%%\n", 100 * fractions[f], slots, 100 * replay(&t, n_experts, POLICY_LRU, slots),
               100 * replay(&t, n_experts, POLICY_LFU, slots));
    }
    free(t.ids);
    return 0;
}

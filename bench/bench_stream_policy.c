/* bench_stream_policy - replays router traces (K3_TRACE files) through the expert cache's
 * eviction policies and prints the hit rate of each at several cache sizes, with Belady's offline
 * optimum as the bound.
 *
 *   build/bench/bench_stream_policy [--json] [--explore] [--chunk N] [--half-life H] [--phase P] TRACE.jsonl [TRACE2.jsonl ...]
 *
 * Cache sizes are fractions of the traced expert population (MoE layers x experts). Each pass
 * (one position, or N consecutive positions with --chunk N, as a verify pass or a prefill chunk
 * reads them) goes through the layers in order; per layer the replay does what the store does:
 * it holds the layer's cached experts, takes a slot for each missing one (the policy's victim;
 * nothing when every slot is held), then records one use of each in ascending id order. The
 * first half of the passes warms the cache; hit rates count the second half. Policies:
 *   lru, lfu, crf      the shipped CacheIndex policies (crf is the store's default)
 *   lru/layer, crf/layer   the cache split into equal per-layer partitions
 *   crf+next           crf that also holds the next layer's experts while choosing victims: what
 *                      router lookahead could add to eviction if it guessed every expert (bound)
 *   belady             evicts the cached expert needed farthest in the future, under the same
 *                      holds (the optimum for any policy that must cache what it reads)
 * Then the default policy again on the trace mapped onto K3's shape (route_trace.h's rule), with
 * its cost per access at that scale. --half-life and --phase set crf's parameters (exploration).
 * --explore adds the candidate policies that were measured against crf (below, replay_explore).
 * --predict gives the hits the default policy predicts for a K3_REPLAY run (bench/bench_replay.sh). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "model/cache_index.h"
#include "store/route_trace.h"
#include "util/err.h"

/* The accesses of a replay: per pass and layer, the distinct experts as keys, ascending. */
typedef struct {
    int n_pass, n_layers, n_experts;
    int max_group;   /* most keys in one group */
    long *start;     /* [n_pass * n_layers + 1] into keys */
    int *keys;
} Accesses;

static long group(const Accesses *a, int pass, int layer) { return (long)pass * a->n_layers + layer; }

/* Adds the distinct experts of sel[0..n) to the group being built (insertion keeps them sorted). */
static void add_distinct(Accesses *a, long *n, long first, int layer, const int *sel, int k) {
    for (int i = 0; i < k; i++) {
        int key = layer * a->n_experts + sel[i];
        long at = *n;
        while (at > first && a->keys[at - 1] > key) at--;
        if (at > first && a->keys[at - 1] == key) continue;
        memmove(a->keys + at + 1, a->keys + at, sizeof *a->keys * (size_t)(*n - at));
        a->keys[at] = key, (*n)++;
    }
}

/* Passes over rows [0, rows): the first `prompt` rows as one pass (none if 0), then `chunk` rows
 * a pass. The trace as it is, or mapped onto map's shape (rows may then run past the trace's end:
 * it repeats). */
static void build(Accesses *a, const RouteTrace *t, const TraceMap *map, int prompt, int chunk, int rows) {
    int layers = map ? map->moe_layers : t->n_layers, k = map ? map->top_k : t->top_k;
    a->n_layers = layers, a->n_experts = map ? map->n_experts : t->n_experts;
    a->n_pass = (prompt > 0) + (rows - prompt + chunk - 1) / chunk;
    a->start = df_malloc(sizeof *a->start * ((size_t)a->n_pass * layers + 1));
    a->keys = df_malloc(sizeof *a->keys * (size_t)rows * layers * k);
    int sel[ROUTE_TRACE_MAX_K * 2];
    long n = 0;
    for (int p = 0, r0 = 0; p < a->n_pass; p++) {
        int r1 = p == 0 && prompt > 0 ? prompt : r0 + chunk < rows ? r0 + chunk : rows;
        for (int l = 0; l < layers; l++) {
            long first = n;
            a->start[group(a, p, l)] = first;
            for (int r = r0; r < r1; r++) {
                if (map) route_trace_map(t, map, l, r, sel);
                add_distinct(a, &n, first, l, map ? sel : route_trace_row(t, r, l), k);
            }
            if (n - first > a->max_group) a->max_group = (int)(n - first);
        }
        r0 = r1;
    }
    a->start[(long)a->n_pass * layers] = n;
}

static void accesses_free(Accesses *a) { free(a->start), free(a->keys); }

typedef struct {
    long hits, needs;
} Count;

typedef struct {
    double half_life, phase;
} CrfParams;

static double rate(Count c) { return c.needs ? (double)c.hits / (double)c.needs : 0; }

/* Holds the cached, not yet held ones among group g's keys; returns how many (in held[]). */
static int hold_group(CacheIndex *ci, const Accesses *a, long g, int *held) {
    int n = 0;
    for (long i = a->start[g]; i < a->start[g + 1]; i++) {
        int s = cidx_lookup(ci, a->keys[i]);
        if (s >= 0 && !ci->locked[s]) cidx_lock(ci, s, 1), held[n++] = s;
    }
    return n;
}

static void release(CacheIndex *ci, const int *held, int n) {
    for (int i = 0; i < n; i++) cidx_lock(ci, held[i], 0);
}

/* Replays layers [lo, hi) of a through one CacheIndex. protect_next: hold the next group's cached
 * keys (within [lo, hi)) while victims are chosen. */
static Count replay_index_passes(const Accesses *a, CachePolicy policy, const CrfParams *crf, int slots, int lo, int hi,
                                 int protect_next, Count *per_pass) {
    CacheIndex ci;
    cidx_init(&ci, policy, slots, a->n_layers, a->n_experts);
    if (policy == POLICY_CRF) ci.half_life = crf->half_life, ci.phase = crf->phase;
    int *held = df_malloc(sizeof *held * (size_t)slots), *ahead = df_malloc(sizeof *ahead * (size_t)slots);
    int *slot_of = df_malloc(sizeof *slot_of * (size_t)a->max_group);
    Count c = {0, 0};
    for (int p = 0; p < a->n_pass; p++) {
        cidx_next_pass(&ci);
        for (int l = lo; l < hi; l++) {
            long g = group(a, p, l), n = a->start[g + 1] - a->start[g];
            int n_held = hold_group(&ci, a, g, held), n_ahead = 0;
            if (protect_next) {
                long next = l + 1 < hi ? g + 1 : p + 1 < a->n_pass ? group(a, p + 1, lo) : -1;
                if (next >= 0) n_ahead = hold_group(&ci, a, next, ahead);
            }
            for (long i = 0; i < n; i++) {
                int key = a->keys[a->start[g] + i], s = cidx_lookup(&ci, key);
                if (p >= a->n_pass / 2) c.needs++, c.hits += s >= 0;
                if (per_pass) per_pass[p].needs++, per_pass[p].hits += s >= 0;
                if (s < 0 && (s = cidx_victim(&ci, l)) >= 0) cidx_assign(&ci, s, key), cidx_lock(&ci, s, 1), held[n_held++] = s;
                slot_of[i] = s;
            }
            release(&ci, ahead, n_ahead);
            for (long i = 0; i < n; i++) cidx_use(&ci, a->keys[a->start[g] + i], slot_of[i]);
            release(&ci, held, n_held);
        }
    }
    free(held), free(ahead), free(slot_of);
    cidx_free(&ci);
    return c;
}

static Count replay_index(const Accesses *a, CachePolicy policy, const CrfParams *crf, int slots, int lo, int hi,
                          int protect_next) {
    return replay_index_passes(a, policy, crf, slots, lo, hi, protect_next, NULL);
}

/* The same cache split into one partition of slots / layers per layer. */
static Count replay_per_layer(const Accesses *a, CachePolicy policy, const CrfParams *crf, int slots) {
    Count c = {0, 0};
    int per = slots / a->n_layers > 0 ? slots / a->n_layers : 1;
    for (int l = 0; l < a->n_layers; l++) {
        Count one = replay_index(a, policy, crf, per, l, l + 1, 0);
        c.hits += one.hits, c.needs += one.needs;
    }
    return c;
}

/* Belady: on a miss, evict the unheld cached key whose next use is farthest (never used again
 * first), under the same holds as the store. */
static Count replay_belady(const Accesses *a, int slots) {
    long total = a->start[(long)a->n_pass * a->n_layers], groups = (long)a->n_pass * a->n_layers;
    long *next_use = df_malloc(sizeof *next_use * (size_t)(total ? total : 1));
    long *seen = df_malloc(sizeof *seen * (size_t)a->n_layers * a->n_experts);
    for (long k = 0; k < (long)a->n_layers * a->n_experts; k++) seen[k] = groups;
    for (long g = groups - 1; g >= 0; g--)
        for (long i = a->start[g]; i < a->start[g + 1]; i++) next_use[i] = seen[a->keys[i]], seen[a->keys[i]] = g;
    int *slot_key = df_malloc(sizeof *slot_key * (size_t)slots), *slot_of = df_malloc(sizeof *slot_of * (size_t)a->n_layers * a->n_experts);
    long *slot_next = df_malloc(sizeof *slot_next * (size_t)slots), *slot_held = df_malloc(sizeof *slot_held * (size_t)slots);
    for (int s = 0; s < slots; s++) slot_key[s] = -1, slot_next[s] = groups + 1, slot_held[s] = -1;
    for (long k = 0; k < (long)a->n_layers * a->n_experts; k++) slot_of[k] = -1;
    Count c = {0, 0};
    for (long g = 0; g < groups; g++) {
        for (long i = a->start[g]; i < a->start[g + 1]; i++)
            if (slot_of[a->keys[i]] >= 0) slot_held[slot_of[a->keys[i]]] = g;
        for (long i = a->start[g]; i < a->start[g + 1]; i++) {
            int key = a->keys[i], s = slot_of[key];
            if (g / a->n_layers >= a->n_pass / 2) c.needs++, c.hits += s >= 0;
            if (s < 0) {
                for (int j = 0; j < slots; j++) /* empty slots have next use groups + 1: taken first */
                    if (slot_held[j] != g && (s < 0 || slot_next[j] > slot_next[s])) s = j;
                if (s < 0) continue;
                if (slot_key[s] >= 0) slot_of[slot_key[s]] = -1;
                slot_key[s] = key, slot_of[key] = s, slot_held[s] = g;
            }
            slot_next[s] = next_use[i];
        }
    }
    free(next_use), free(seen), free(slot_key), free(slot_of), free(slot_next), free(slot_held);
    return c;
}

/* --explore: candidate policies measured against crf on the same replay (docs/PERFORMANCE.md,
 * "Policies that did not beat crf"). Each scores every unheld cached slot and evicts the lowest
 * (ties: least recently used, then the lower slot), so it costs O(slots) per miss: exploration,
 * not the store's bookkeeping.
 *   learned     per MoE layer, an online table of how often an expert in a given state (passes
 *               since its last use; its crf count, in half-octave bins) was chosen at the layer's
 *               next visit; evicts the lowest estimate for the state it will have at its next
 *               visit: any rule on recency and frequency alone, fitted to the trace as it goes
 *   crf+reuse   crf with each layer's counts scaled by (its measured reuse / the mean)^0.5, the
 *               share of its experts the previous position also chose, so that layers that reuse
 *               more keep more slots
 *   crf/depth   crf with a half-life growing with depth, 12/sqrt(2) passes at the first MoE layer
 *               to 12 x sqrt(2) at the last (deep layers reuse more)
 *   crf+oracle  crf that knows the next layer's experts exactly and counts the rest of that layer
 *               one halving lower, as the layer being computed (a bound for eviction informed by
 *               router lookahead) */
enum { X_LEARNED, X_REUSE, X_DEPTH, X_ORACLE, N_X };
static const char *const X_NAME[N_X] = {"learned", "crf+reuse", "crf/depth", "crf+oracle"};
enum { AGE_BINS = 34, COUNT_BINS = 12 }; /* ages 0..32 and "never"; count bins */

typedef struct {
    const Accesses *a;
    int kind, slots;
    long pass, tick;
    int *slot_of, *key_of;
    long *last_use, *last_pass; /* [slots] tick of the last use; [keys] pass of the last use, -1: never */
    uint8_t *held, *chosen;     /* [slots]; [n_experts] the group being replayed */
    double *weight;             /* [keys] log2(decayed count) + pass / the layer's half-life */
    double *seen, *hit;         /* learned: [layer][age bin][count bin] */
    double *reuse, *reuse_of;   /* crf+reuse: [layer] experts chosen, of them chosen at the previous pass */
    double *reuse_bias;         /* crf+reuse: [layer] 0.5 log2(reuse / mean reuse), set per victim */
    uint8_t *next_chosen;       /* crf+oracle: [n_experts] the next group's experts */
    int next_layer;
} Explorer;

static double x_half_life(const Explorer *x, int layer) {
    if (x->kind != X_DEPTH || x->a->n_layers < 2) return CIDX_CRF_HALF_LIFE;
    return CIDX_CRF_HALF_LIFE * exp2((double)layer / (x->a->n_layers - 1) - 0.5);
}

/* log2 of the key's decayed count at pass `at` (-inf: never used). */
static double x_log_count(const Explorer *x, int key, long at) {
    return x->weight[key] - (double)at / x_half_life(x, key / x->a->n_experts);
}

static int x_state(const Explorer *x, int key, long at) {
    int layer = key / x->a->n_experts;
    long age = x->last_pass[key] < 0 ? AGE_BINS - 1 : at - x->last_pass[key];
    double lc = x_log_count(x, key, at);
    int a = age > AGE_BINS - 2 ? AGE_BINS - 2 : (int)age;
    int c = lc == -INFINITY ? 0 : (int)floor(2 * lc) + 6;
    c = c < 1 ? 1 : c > COUNT_BINS - 1 ? COUNT_BINS - 1 : c;
    return (layer * AGE_BINS + a) * COUNT_BINS + c;
}

static double x_reuse(const Explorer *x, int layer) { return (x->reuse_of[layer] + 1) / (x->reuse[layer] + 8); }

static double x_score(const Explorer *x, int slot, int now) {
    int key = x->key_of[slot], layer = key / x->a->n_experts, L = x->a->n_layers;
    int ahead = ((layer - now - 1) % L + L) % L + 1;
    if (x->kind == X_LEARNED) { /* prior: chance, 8 observations strong */
        int s = x_state(x, key, layer > now ? x->pass : x->pass + 1);
        return (x->hit[s] + 1) / (x->seen[s] + 8);
    }
    double phase = (double)ahead / L + (layer == now), bias = 0;
    if (x->kind == X_ORACLE && layer == x->next_layer && !x->next_chosen[key % x->a->n_experts]) phase += 1;
    if (x->kind == X_REUSE) bias = x->reuse_bias[layer];
    return x_log_count(x, key, x->pass) - CIDX_CRF_PHASE * phase + bias;
}

static int x_victim(Explorer *x, int now) {
    if (x->kind == X_REUSE) {
        double mean = 0;
        for (int l = 0; l < x->a->n_layers; l++) mean += x_reuse(x, l) / x->a->n_layers;
        for (int l = 0; l < x->a->n_layers; l++) x->reuse_bias[l] = 0.5 * log2(x_reuse(x, l) / mean);
    }
    int best = -1;
    double best_score = 0;
    for (int s = 0; s < x->slots; s++) {
        if (x->held[s]) continue;
        if (x->key_of[s] < 0) return s;
        double v = x_score(x, s, now);
        if (best < 0 || v < best_score || (v == best_score && x->last_use[s] < x->last_use[best])) best = s, best_score = v;
    }
    return best;
}

/* Before group (pass, layer) is used: what the learned and reuse statistics observe. */
static void x_observe(Explorer *x, int layer) {
    int E = x->a->n_experts;
    for (int e = 0; e < E; e++) {
        int key = layer * E + e;
        if (x->kind == X_LEARNED) {
            int s = x_state(x, key, x->pass);
            x->seen[s]++, x->hit[s] += x->chosen[e];
        }
        if (x->kind == X_REUSE && x->chosen[e]) x->reuse[layer]++, x->reuse_of[layer] += x->last_pass[key] == x->pass - 1;
    }
}

static void x_mark(const Accesses *a, long g, uint8_t *set) {
    memset(set, 0, (size_t)a->n_experts);
    for (long i = a->start[g]; i < a->start[g + 1]; i++) set[a->keys[i] % a->n_experts] = 1;
}

static Count replay_explore(const Accesses *a, int kind, int slots) {
    long keys = (long)a->n_layers * a->n_experts, cells = (long)a->n_layers * AGE_BINS * COUNT_BINS;
    Explorer x = {.a = a, .kind = kind, .slots = slots, .next_layer = -1};
    x.slot_of = df_malloc(sizeof(int) * (size_t)keys), x.key_of = df_malloc(sizeof(int) * (size_t)slots);
    x.last_use = df_calloc((size_t)slots, sizeof(long)), x.last_pass = df_malloc(sizeof(long) * (size_t)keys);
    x.held = df_calloc((size_t)slots, 1), x.chosen = df_calloc((size_t)a->n_experts, 1);
    x.next_chosen = df_calloc((size_t)a->n_experts, 1), x.weight = df_malloc(sizeof(double) * (size_t)keys);
    x.seen = df_calloc((size_t)cells, sizeof(double)), x.hit = df_calloc((size_t)cells, sizeof(double));
    x.reuse = df_calloc((size_t)a->n_layers, sizeof(double)), x.reuse_of = df_calloc((size_t)a->n_layers, sizeof(double));
    x.reuse_bias = df_calloc((size_t)a->n_layers, sizeof(double));
    for (long k = 0; k < keys; k++) x.slot_of[k] = -1, x.last_pass[k] = -1, x.weight[k] = -INFINITY;
    for (int s = 0; s < slots; s++) x.key_of[s] = -1;
    int *slot_of = df_malloc(sizeof(int) * (size_t)a->max_group);
    Count c = {0, 0};
    for (int p = 0; p < a->n_pass; p++) {
        x.pass = p + 1;
        for (int l = 0; l < a->n_layers; l++) {
            long g = group(a, p, l), n = a->start[g + 1] - a->start[g];
            const int *key = a->keys + a->start[g];
            x_mark(a, g, x.chosen);
            x_observe(&x, l);
            x.next_layer = g + 1 < (long)a->n_pass * a->n_layers ? (l + 1) % a->n_layers : -1;
            if (x.next_layer >= 0) x_mark(a, g + 1, x.next_chosen);
            for (long i = 0; i < n; i++)
                if (x.slot_of[key[i]] >= 0) x.held[x.slot_of[key[i]]] = 1;
            for (long i = 0; i < n; i++) {
                int s = x.slot_of[key[i]];
                if (p >= a->n_pass / 2) c.needs++, c.hits += s >= 0;
                if (s < 0 && (s = x_victim(&x, l)) >= 0) {
                    if (x.key_of[s] >= 0) x.slot_of[x.key_of[s]] = -1;
                    x.key_of[s] = key[i], x.slot_of[key[i]] = s, x.held[s] = 1;
                }
                slot_of[i] = s;
            }
            for (long i = 0; i < n; i++) { /* one use each: count = decayed count + 1 */
                double now = (double)x.pass / x_half_life(&x, l);
                x.weight[key[i]] = now + log2(1.0 + exp2(x.weight[key[i]] - now));
                x.last_pass[key[i]] = x.pass, x.tick++;
                if (slot_of[i] >= 0) x.last_use[slot_of[i]] = x.tick, x.held[slot_of[i]] = 0;
            }
        }
    }
    free(x.slot_of), free(x.key_of), free(x.last_use), free(x.last_pass), free(x.held), free(x.chosen), free(x.next_chosen);
    free(x.weight), free(x.seen), free(x.hit), free(x.reuse), free(x.reuse_of), free(x.reuse_bias), free(slot_of);
    return c;
}

enum { P_LRU, P_LFU, P_CRF, P_LRU_LAYER, P_CRF_LAYER, P_CRF_NEXT, P_BELADY, N_POL };
static const char *const POL_NAME[N_POL] = {"lru", "lfu", "crf", "lru/layer", "crf/layer", "crf+next", "belady"};
static const double FRACTIONS[] = {0.02, 0.05, 0.10, 0.25, 0.50};
#define N_FRAC (int)(sizeof FRACTIONS / sizeof FRACTIONS[0])

static double run_policy(const Accesses *a, int pol, const CrfParams *crf, int slots) {
    switch (pol) {
    case P_LRU: return rate(replay_index(a, POLICY_LRU, crf, slots, 0, a->n_layers, 0));
    case P_LFU: return rate(replay_index(a, POLICY_LFU, crf, slots, 0, a->n_layers, 0));
    case P_CRF: return rate(replay_index(a, POLICY_CRF, crf, slots, 0, a->n_layers, 0));
    case P_LRU_LAYER: return rate(replay_per_layer(a, POLICY_LRU, crf, slots));
    case P_CRF_LAYER: return rate(replay_per_layer(a, POLICY_CRF, crf, slots));
    case P_CRF_NEXT: return rate(replay_index(a, POLICY_CRF, crf, slots, 0, a->n_layers, 1));
    default: return rate(replay_belady(a, slots));
    }
}

static int slots_for(const Accesses *a, double fraction, int top_k) {
    int slots = (int)(fraction * a->n_layers * a->n_experts);
    return slots < 2 * top_k ? 2 * top_k : slots;
}

static json_t *json_rates(const double *v, int n) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_real(v[i]));
    return arr;
}

/* The policy table of one trace. */
static json_t *policy_table(const Accesses *a, const RouteTrace *t, int chunk, const CrfParams *crf, int quiet) {
    double hit[N_POL][N_FRAC], closed[N_FRAC];
    int slots[N_FRAC];
    json_t *rates = json_object(), *jslots = json_array();
    if (!quiet) {
        printf("%-6s %6s", "cache", "slots");
        for (int p = 0; p < N_POL; p++) printf(" %9s%s", POL_NAME[p], p == P_CRF ? "*" : " ");
        printf(" | default closes\n");
    }
    for (int f = 0; f < N_FRAC; f++) {
        slots[f] = slots_for(a, FRACTIONS[f], t->top_k);
        for (int p = 0; p < N_POL; p++) hit[p][f] = run_policy(a, p, crf, slots[f]);
        double gap = hit[P_BELADY][f] - hit[P_LRU][f];
        closed[f] = gap > 1e-9 ? (hit[P_CRF][f] - hit[P_LRU][f]) / gap : 1;
        json_array_append_new(jslots, json_integer(slots[f]));
        if (quiet) continue;
        printf("%5.0f%% %6d", 100 * FRACTIONS[f], slots[f]);
        for (int p = 0; p < N_POL; p++) printf(" %8.1f%%  ", 100 * hit[p][f]);
        printf(" | %5.0f%% of the gap\n", 100 * closed[f]);
    }
    for (int p = 0; p < N_POL; p++) json_object_set_new(rates, POL_NAME[p], json_rates(hit[p], N_FRAC));
    json_t *fr = json_array();
    for (int f = 0; f < N_FRAC; f++) json_array_append_new(fr, json_real(FRACTIONS[f]));
    return json_pack("{s:i,s:i,s:i,s:i,s:i,s:o,s:o,s:o,s:o}", "positions", t->n_rows, "layers", t->n_layers, "top_k",
                     t->top_k, "experts", t->n_experts, "chunk", chunk, "fractions", fr, "slots", jslots, "hit_rate", rates,
                     "gap_closed", json_rates(closed, N_FRAC));
}

/* --explore's table: the candidates beside crf and Belady, with the share of the lru-Belady gap
 * each closes; adds their rates to the trace's JSON object. */
static void explore_table(const Accesses *a, json_t *table, int quiet) {
    json_t *jslots = json_object_get(table, "slots"), *rates = json_object_get(table, "hit_rate"), *out = json_object();
    if (!quiet) {
        printf("candidates (hit rate, and the share of the lru-belady gap closed):\n%-6s %9s", "cache", "crf");
        for (int k = 0; k < N_X; k++) printf(" %17s", X_NAME[k]);
        printf(" %9s\n", "belady");
    }
    double hit[N_X][N_FRAC];
    for (int f = 0; f < N_FRAC; f++) {
        int slots = (int)json_integer_value(json_array_get(jslots, (size_t)f));
        double lru = json_real_value(json_array_get(json_object_get(rates, "lru"), (size_t)f));
        double crf = json_real_value(json_array_get(json_object_get(rates, "crf"), (size_t)f));
        double opt = json_real_value(json_array_get(json_object_get(rates, "belady"), (size_t)f)), gap = opt - lru;
        if (!quiet) printf("%5.0f%% %7.1f%% %3.0f%%", 100 * FRACTIONS[f], 100 * crf, gap > 1e-9 ? 100 * (crf - lru) / gap : 100);
        for (int k = 0; k < N_X; k++) {
            hit[k][f] = rate(replay_explore(a, k, slots));
            if (!quiet) printf("  %7.1f%% (%3.0f%%)", 100 * hit[k][f], gap > 1e-9 ? 100 * (hit[k][f] - lru) / gap : 100);
        }
        if (!quiet) printf(" %8.1f%%\n", 100 * opt);
    }
    for (int k = 0; k < N_X; k++) json_object_set_new(out, X_NAME[k], json_rates(hit[k], N_FRAC));
    json_object_set_new(table, "explore", out);
}

/* The default policy on the trace mapped onto K3's shape (92 MoE layers x 896 experts, top-16):
 * hit rates at fractions of the experts the mapping uses, and the cost of one access. */
static json_t *k3_scale(const RouteTrace *t, const CrfParams *crf, int quiet, const char *path) {
    TraceMap map;
    if (route_trace_mapping(t, 92, 896, 16, &map, path)) return NULL;
    Accesses a = {0};
    build(&a, t, &map, 0, 1, t->n_rows);
    int used = map.moe_layers * map.streams * t->n_experts;
    json_t *rows = json_array();
    if (!quiet) printf("mapped onto K3's shape (92 MoE layers x 896 experts, top-16; %d of them replayed):\n", used);
    for (int f = 1; f < 4; f++) {
        int slots = (int)(FRACTIONS[f] * used);
        double t0 = df_now();
        Count c = replay_index(&a, CACHE_POLICY_DEFAULT, crf, slots, 0, a.n_layers, 0);
        double s = df_now() - t0, lru = rate(replay_index(&a, POLICY_LRU, crf, slots, 0, a.n_layers, 0));
        long accesses = a.start[(long)a.n_pass * a.n_layers];
        if (!quiet)
            printf("  %3.0f%% of them = %5d slots: %s %.1f%%, lru %.1f%%, %.0f ns per access (cache bookkeeping only)\n",
                   100 * FRACTIONS[f], slots, cache_policy_name(CACHE_POLICY_DEFAULT), 100 * rate(c), 100 * lru, 1e9 * s / accesses);
        json_array_append_new(rows, json_pack("{s:f,s:i,s:f,s:f,s:f}", "fraction", FRACTIONS[f], "slots", slots, "hit_rate",
                                              rate(c), "lru", lru, "ns_per_access", 1e9 * s / accesses));
    }
    accesses_free(&a);
    return json_pack("{s:i,s:i,s:i,s:i,s:o}", "moe_layers", 92, "experts", 896, "top_k", 16, "replayed_experts", used, "rows", rows);
}

/* Distinct experts of a pass, against one position's. */
static double union_factor(const Accesses *a, const RouteTrace *t) {
    return (double)a->start[(long)a->n_pass * a->n_layers] / ((double)a->n_pass * t->n_layers * t->top_k);
}

/* --predict: the default policy's hits per pass for a run of the store on a model of another
 * shape replaying the trace (K3_REPLAY): a prompt of `prompt` positions fed as one pass, then one
 * position a pass; one JSON object with the hits and needs of every pass. */
static int predict(const char *spec, const char *path, const CrfParams *crf) {
    int layers, experts, top_k, slots, prompt, positions;
    if (sscanf(spec, "%d,%d,%d,%d,%d,%d", &layers, &experts, &top_k, &slots, &prompt, &positions) != 6 || layers < 1 ||
        experts < 1 || top_k < 1 || top_k > ROUTE_TRACE_MAX_K || slots < 1 || prompt < 0 || positions < 1 ||
        prompt + positions > ROUTE_TRACE_MAX_ROWS)
        return fprintf(stderr, "--predict LAYERS,EXPERTS,TOP_K,SLOTS,PROMPT,POSITIONS\n"), 2;
    RouteTrace t;
    TraceMap map;
    if (route_trace_load(&t, path) || route_trace_mapping(&t, layers, experts, top_k, &map, path))
        return fprintf(stderr, "%s\n", df_errmsg()), 1;
    Accesses a = {0};
    build(&a, &t, &map, prompt, 1, prompt + positions);
    Count *per = df_calloc((size_t)a.n_pass, sizeof *per);
    replay_index_passes(&a, CACHE_POLICY_DEFAULT, crf, slots, 0, a.n_layers, 0, per);
    json_t *hits = json_array(), *needs = json_array();
    for (int p = 0; p < a.n_pass; p++) json_array_append_new(hits, json_integer(per[p].hits)), json_array_append_new(needs, json_integer(per[p].needs));
    json_t *out = json_pack("{s:s,s:s,s:i,s:i,s:o,s:o}", "file", path, "policy", cache_policy_name(CACHE_POLICY_DEFAULT), "slots",
                            slots, "prompt", prompt, "hits", hits, "needs", needs);
    char *text = json_dumps(out, JSON_COMPACT);
    puts(text);
    free(text), json_decref(out), free(per);
    accesses_free(&a);
    route_trace_free(&t);
    return 0;
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--json] [--explore] [--chunk N] [--half-life H] [--phase P] TRACE.jsonl [TRACE2.jsonl ...]\n"
                    "       %s --predict LAYERS,EXPERTS,TOP_K,SLOTS,PROMPT,POSITIONS TRACE.jsonl\n", argv0, argv0);
    return 2;
}

int main(int argc, char **argv) {
    int json = 0, explore = 0, chunk = 1, first = 1;
    const char *predict_spec = NULL;
    CrfParams crf = {CIDX_CRF_HALF_LIFE, CIDX_CRF_PHASE};
    for (; first < argc && !strncmp(argv[first], "--", 2); first++) {
        if (!strcmp(argv[first], "--json")) json = 1;
        else if (!strcmp(argv[first], "--explore")) explore = 1;
        else if (!strcmp(argv[first], "--chunk") && first + 1 < argc) chunk = atoi(argv[++first]);
        else if (!strcmp(argv[first], "--half-life") && first + 1 < argc) crf.half_life = atof(argv[++first]);
        else if (!strcmp(argv[first], "--phase") && first + 1 < argc) crf.phase = atof(argv[++first]);
        else if (!strcmp(argv[first], "--predict") && first + 1 < argc) predict_spec = argv[++first];
        else return usage(argv[0]);
    }
    if (first >= argc || chunk < 1 || chunk > 64 || !(crf.half_life > 0) || !(crf.phase >= 0)) return usage(argv[0]);
    if (predict_spec) return predict(predict_spec, argv[first], &crf);
    json_t *traces = json_array();
    for (int i = first; i < argc; i++) {
        RouteTrace t;
        if (route_trace_load(&t, argv[i])) return fprintf(stderr, "%s\n", df_errmsg()), 1;
        Accesses a = {0};
        build(&a, &t, NULL, 0, chunk, t.n_rows);
        if (!json)
            printf("trace %s: %d positions, %d MoE layers, top-%d of %d experts; %d position%s per pass (%.2fx one "
                   "position's experts); hit rates over the second half\n",
                   argv[i], t.n_rows, t.n_layers, t.top_k, t.n_experts, chunk, chunk == 1 ? "" : "s", union_factor(&a, &t));
        json_t *table = policy_table(&a, &t, chunk, &crf, json);
        if (explore) explore_table(&a, table, json);
        json_object_set_new(table, "file", json_string(argv[i]));
        json_object_set_new(table, "union_factor", json_real(union_factor(&a, &t)));
        json_t *k3 = k3_scale(&t, &crf, json, argv[i]);
        if (!k3 && !json) printf("(not mapped onto K3's shape: %s)\n", df_errmsg());
        if (k3) json_object_set_new(table, "k3_scale", k3);
        json_array_append_new(traces, table);
        accesses_free(&a);
        route_trace_free(&t);
        if (!json) printf("* default: %s (half-life %g passes, phase %g)\n\n", cache_policy_name(CACHE_POLICY_DEFAULT), crf.half_life,
                   crf.phase);
    }
    if (json) {
        json_t *out = json_pack("{s:s,s:f,s:f,s:o}", "default", cache_policy_name(CACHE_POLICY_DEFAULT), "crf_half_life", crf.half_life,
                                "crf_phase", crf.phase,
                                "traces", traces);
        char *s = json_dumps(out, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(out);
    } else {
        json_decref(traces);
    }
    return 0;
}

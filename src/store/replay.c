#include "store/replay.h"

#include <stdint.h>
#include <string.h>

static void replay_replace(ExpertSource *src, int layer, int pos, int *sel, float *weights, int T, int k) {
    ReplaySource *r = (ReplaySource *)src;
    r->pos = pos;
    for (int t = 0; t < T; t++) {
        route_trace_map(&r->trace, &r->map, layer - r->first_moe, (long)pos + t, sel + t * k);
        for (int i = 0; i < k; i++) weights[t * k + i] = 1.0f / (float)k;
    }
}

/* A uniform number in [0, 1) fixed by (pos, layer, expert). */
static double unit_hash(long pos, int layer, int expert) {
    uint64_t x = (uint64_t)pos * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer * 0xc2b2ae3d27d4eb4full ^ (uint64_t)expert;
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 27, x *= 0x94d049bb133111ebull, x ^= x >> 31;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* A guess at `layer` for the forward's rows: the replayed choices kept with probability recall,
 * the rest the real router's guesses. */
static void replay_predict(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ReplaySource *r = (ReplaySource *)src;
    int guess[MODEL_MAX_VERIFY * K3_MAX_TOP_K], truth[ROUTE_TRACE_MAX_K * 2]; /* (guesses: T <= MODEL_MAX_VERIFY) */
    for (int t = 0; t < T; t++) {
        route_trace_map(&r->trace, &r->map, layer - r->first_moe, (long)r->pos + t, truth);
        for (int i = 0; i < k; i++)
            guess[t * k + i] = unit_hash(r->pos + t, layer, truth[i]) < r->recall ? truth[i] : sel[t * k + i];
    }
    r->wrap.inner->predict(r->wrap.inner, layer, guess, T, k);
}

int replay_open(ReplaySource *r, ExpertSource *inner, const K3Config *c, const char *path, double lookahead_recall) {
    memset(r, 0, sizeof *r);
    if (route_trace_load(&r->trace, path)) return -1;
    if (route_trace_mapping(&r->trace, c->n_layers - c->first_dense, c->n_experts, c->top_k, &r->map, path)) {
        route_trace_free(&r->trace);
        return -1;
    }
    expert_wrap_init(&r->wrap, inner);
    r->wrap.src.replace = replay_replace;
    r->recall = lookahead_recall;
    r->wrap.src.predict = inner->predict && lookahead_recall >= 0 ? replay_predict : NULL;
    r->first_moe = c->first_dense;
    return 0;
}

void replay_close(ReplaySource *r) {
    route_trace_free(&r->trace);
    memset(r, 0, sizeof *r);
}

#include "store/replay.h"

#include <string.h>

static void replay_replace(ExpertSource *src, int layer, int pos, int *sel, float *weights, int T, int k) {
    ReplaySource *r = (ReplaySource *)src;
    for (int t = 0; t < T; t++) {
        route_trace_map(&r->trace, &r->map, layer - r->first_moe, (long)pos + t, sel + t * k);
        for (int i = 0; i < k; i++) weights[t * k + i] = 1.0f / (float)k;
    }
}

int replay_open(ReplaySource *r, ExpertSource *inner, const K3Config *c, const char *path) {
    memset(r, 0, sizeof *r);
    if (route_trace_load(&r->trace, path)) return -1;
    if (route_trace_mapping(&r->trace, c->n_layers - c->first_dense, c->n_experts, c->top_k, &r->map, path)) {
        route_trace_free(&r->trace);
        return -1;
    }
    expert_wrap_init(&r->wrap, inner);
    r->wrap.src.replace = replay_replace;
    r->wrap.src.predict = NULL; /* router lookahead would guess from the real router */
    r->first_moe = c->first_dense;
    return 0;
}

void replay_close(ReplaySource *r) {
    route_trace_free(&r->trace);
    memset(r, 0, sizeof *r);
}

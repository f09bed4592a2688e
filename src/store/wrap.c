#include "store/wrap.h"

#include <string.h>

static ExpertSource *inner_of(ExpertSource *src) { return ((ExpertWrap *)src)->inner; }

static int wrap_acquire(ExpertSource *src, int layer, const int *ids, int n, ExpertMats *out) {
    ExpertSource *in = inner_of(src);
    return in->acquire(in, layer, ids, n, out);
}

static void wrap_route(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertSource *in = inner_of(src);
    in->route(in, layer, sel, T, k);
}

static void wrap_predict(ExpertSource *src, int layer, const int *sel, int T, int k) {
    ExpertSource *in = inner_of(src);
    in->predict(in, layer, sel, T, k);
}

static void wrap_replace(ExpertSource *src, int layer, int pos, int *sel, float *weights, int T, int k) {
    ExpertSource *in = inner_of(src);
    in->replace(in, layer, pos, sel, weights, T, k);
}

static int wrap_ready_first(ExpertSource *src, int layer, int *ids, int n) {
    ExpertSource *in = inner_of(src);
    return in->ready_first(in, layer, ids, n);
}

void expert_wrap_init(ExpertWrap *w, ExpertSource *inner) {
    memset(w, 0, sizeof *w);
    w->inner = inner;
    w->src.acquire = wrap_acquire;
    w->src.max_batch = inner->max_batch;
    w->src.in_place = inner->in_place;
    w->src.route = inner->route ? wrap_route : NULL;
    w->src.predict = inner->predict ? wrap_predict : NULL;
    w->src.replace = inner->replace ? wrap_replace : NULL;
    w->src.ready_first = inner->ready_first ? wrap_ready_first : NULL;
}

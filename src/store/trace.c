#include "store/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* One line per position of the forward just finished. */
static void flush(TraceSource *t) {
    for (int r = 0; r < t->rows; r++, t->pos++) {
        fprintf(t->f, "{\"pos\":%lld,\"layers\":{", t->pos);
        int first = 1;
        for (int l = 0; l < t->n_layers; l++) {
            if (!t->seen[l]) continue;
            fprintf(t->f, "%s\"%d\":[", first ? "" : ",", l);
            const int *s = t->sel + ((size_t)l * (size_t)t->cap + r) * t->top_k;
            for (int k = 0; k < t->top_k; k++) fprintf(t->f, k ? ",%d" : "%d", s[k]);
            fputc(']', t->f);
            first = 0;
        }
        fputs("}}\n", t->f);
    }
    memset(t->seen, 0, (size_t)t->n_layers);
    t->rows = 0;
}

static void trace_route(ExpertSource *src, int layer, const int *sel, int T, int k) {
    TraceSource *t = (TraceSource *)src;
    if (t->wrap.inner->route) t->wrap.inner->route(t->wrap.inner, layer, sel, T, k);
    if (layer <= t->last_layer && t->rows) flush(t); /* a new forward began */
    t->last_layer = layer;
    if (T > t->cap) { /* a longer pass than any before (the layers' earlier rows were flushed) */
        free(t->sel);
        t->cap = T;
        t->sel = df_malloc(sizeof *t->sel * (size_t)t->n_layers * (size_t)T * (size_t)k);
    }
    t->rows = T;
    t->seen[layer] = 1;
    memcpy(t->sel + (size_t)layer * (size_t)t->cap * k, sel, sizeof *sel * (size_t)T * (size_t)k);
}

int trace_open(TraceSource *t, ExpertSource *inner, const K3Config *c, const char *path) {
    memset(t, 0, sizeof *t);
    t->f = fopen(path, "a");
    if (!t->f) return df_fail("K3_TRACE: cannot open %s: %s", path, strerror(errno));
    t->path = df_strdup(path);
    expert_wrap_init(&t->wrap, inner);
    t->wrap.src.route = trace_route;
    t->n_layers = c->n_layers, t->top_k = c->top_k, t->last_layer = -1;
    t->cap = MODEL_BATCH_ROWS;
    t->sel = df_malloc(sizeof *t->sel * (size_t)c->n_layers * (size_t)t->cap * (size_t)c->top_k);
    t->seen = df_calloc((size_t)c->n_layers, 1);
    return 0;
}

int trace_close(TraceSource *t) {
    if (!t->f) return 0;
    if (t->rows) flush(t);
    /* a write that failed earlier (a full disk) left the stream's error flag set */
    int failed = ferror(t->f), rc = 0;
    if (fclose(t->f) != 0) rc = df_fail("K3_TRACE: cannot write the trace to %s: %s", t->path, strerror(errno));
    else if (failed) rc = df_fail("K3_TRACE: writing the trace to %s failed (a full disk or an I/O error)", t->path);
    free(t->path);
    free(t->sel), free(t->seen);
    memset(t, 0, sizeof *t);
    return rc;
}

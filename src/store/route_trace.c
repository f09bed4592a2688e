#include "store/route_trace.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define MAX_LINE (16u << 20)
#define MAX_LAYER_NUMBER 4095

/* A layer key: a decimal layer number in 0..MAX_LAYER_NUMBER. */
static int layer_number(const char *key) {
    char *end;
    errno = 0;
    long l = strtol(key, &end, 10);
    return errno || !*key || *end || l < 0 || l > MAX_LAYER_NUMBER ? -1 : (int)l;
}

/* The first line fixes the layers and top-k every other line must have. */
static int take_shape(RouteTrace *t, json_t *layers, const char *path) {
    const char *key;
    json_t *v;
    int n = 0, k = -1;
    t->layer = df_malloc(sizeof *t->layer * (json_object_size(layers) ? json_object_size(layers) : 1));
    json_object_foreach(layers, key, v) {
        int l = layer_number(key), at = n;
        if (l < 0) return df_fail("%s: line 1: layer key '%s' is not a layer number", path, key);
        if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > ROUTE_TRACE_MAX_K)
            return df_fail("%s: line 1: layer %s is not a list of 1..%d experts", path, key, ROUTE_TRACE_MAX_K);
        if (k >= 0 && (int)json_array_size(v) != k)
            return df_fail("%s: line 1: layer %s has %zu experts, layers before it %d", path, key, json_array_size(v), k);
        k = (int)json_array_size(v);
        while (at > 0 && t->layer[at - 1] > l) t->layer[at] = t->layer[at - 1], at--;
        t->layer[at] = l, n++;
    }
    if (n == 0) return df_fail("%s: line 1 routes no layer", path);
    t->n_layers = n, t->top_k = k;
    return 0;
}

static int read_selection(RouteTrace *t, json_t *arr, int *out, const char *path, long line, const char *key) {
    if (!json_is_array(arr) || (int)json_array_size(arr) != t->top_k)
        return df_fail("%s: line %ld: layer %s is not a list of %d experts", path, line, key, t->top_k);
    for (int i = 0; i < t->top_k; i++) {
        json_t *e = json_array_get(arr, (size_t)i);
        json_int_t id = json_is_integer(e) ? json_integer_value(e) : -1;
        if (id < 0 || id >= ROUTE_TRACE_MAX_EXPERTS)
            return df_fail("%s: line %ld: layer %s: expert %d is not an id in 0..%d", path, line, key, i, ROUTE_TRACE_MAX_EXPERTS - 1);
        for (int j = 0; j < i; j++)
            if (out[j] == (int)id) return df_fail("%s: line %ld: layer %s selects expert %d twice", path, line, key, (int)id);
        out[i] = (int)id;
        if (id >= t->n_experts) t->n_experts = (int)id + 1;
    }
    return 0;
}

static int read_row(RouteTrace *t, json_t *j, const char *path, long line) {
    json_t *pos = json_object_get(j, "pos"), *layers = json_object_get(j, "layers");
    if (!json_is_integer(pos) || json_integer_value(pos) < 0)
        return df_fail("%s: line %ld: \"pos\" is not a position", path, line);
    if (!json_is_object(layers)) return df_fail("%s: line %ld: \"layers\" is not an object", path, line);
    if ((int)json_object_size(layers) != t->n_layers)
        return df_fail("%s: line %ld: routes %zu layers, line 1 routes %d", path, line, json_object_size(layers), t->n_layers);
    int *row = t->sel + (long)t->n_rows * t->n_layers * t->top_k;
    for (int i = 0; i < t->n_layers; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", t->layer[i]);
        json_t *arr = json_object_get(layers, key);
        if (!arr) return df_fail("%s: line %ld: layer %s is missing (line 1 routes it)", path, line, key);
        if (read_selection(t, arr, row + (long)i * t->top_k, path, line, key)) return -1;
    }
    t->n_rows++;
    return 0;
}

/* Room for one more row (the shape is known after the first line). */
static int grow(RouteTrace *t, long *cap, const char *path) {
    if (t->n_rows < *cap) return 0;
    if (t->n_rows >= ROUTE_TRACE_MAX_ROWS) return df_fail("%s: more than %d lines", path, ROUTE_TRACE_MAX_ROWS);
    *cap = *cap ? 2 * *cap : 256;
    t->sel = df_realloc(t->sel, sizeof *t->sel * (size_t)*cap * (size_t)t->n_layers * (size_t)t->top_k);
    return 0;
}

static int parse_lines(RouteTrace *t, FILE *f, const char *path) {
    char *buf = NULL;
    size_t cap = 0;
    long rows_cap = 0, line = 0;
    ssize_t n;
    int rc = 0;
    while (!rc && (n = getline(&buf, &cap, f)) >= 0) {
        line++;
        if (n == 0 || (n == 1 && buf[0] == '\n')) continue;
        if ((size_t)n > MAX_LINE) {
            rc = df_fail("%s: line %ld is longer than %u bytes", path, line, MAX_LINE);
            break;
        }
        json_error_t jerr;
        json_t *j = json_loadb(buf, (size_t)n, 0, &jerr);
        if (!j) rc = df_fail("%s: line %ld: not JSON: %s", path, line, jerr.text);
        else if (!json_is_object(j)) rc = df_fail("%s: line %ld: not a trace line (an object with pos and layers)", path, line);
        else if (!t->layer) { /* the first line gives the shape, then its row is read like the others */
            json_t *layers = json_object_get(j, "layers");
            rc = !json_is_object(layers) ? df_fail("%s: line %ld: \"layers\" is not an object", path, line)
                                         : take_shape(t, layers, path);
        }
        if (!rc && j) rc = grow(t, &rows_cap, path) || read_row(t, j, path, line) ? -1 : 0;
        json_decref(j);
    }
    if (!rc && ferror(f)) rc = df_fail("%s: cannot read: %s", path, strerror(errno));
    free(buf);
    return rc;
}

int route_trace_load(RouteTrace *t, const char *path) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return df_fail("%s: cannot open the router trace: %s", path, strerror(errno));
    int rc = parse_lines(t, f, path);
    fclose(f);
    if (!rc && t->n_rows < 1) rc = df_fail("%s: the router trace has no lines", path);
    if (rc) route_trace_free(t);
    return rc;
}

void route_trace_free(RouteTrace *t) {
    free(t->layer), free(t->sel);
    memset(t, 0, sizeof *t);
}

int route_trace_mapping(const RouteTrace *t, int moe_layers, int n_experts, int top_k, TraceMap *m, const char *path) {
    memset(m, 0, sizeof *m);
    m->moe_layers = moe_layers, m->n_experts = n_experts, m->top_k = top_k;
    m->streams = (top_k + t->top_k - 1) / t->top_k;
    if (moe_layers < 1 || top_k < 1) return df_fail("%s: the model has no routed experts to replay a trace on", path);
    if ((long)m->streams * t->n_experts > n_experts)
        return df_fail("%s: a trace of %d experts top-%d needs %d x %d experts per layer for a top-%d model; it has %d", path,
                       t->n_experts, t->top_k, m->streams, t->n_experts, top_k, n_experts);
    m->laps = (int)(((long)moe_layers * m->streams + t->n_layers - 1) / t->n_layers);
    return 0;
}

void route_trace_map(const RouteTrace *t, const TraceMap *m, int j, long pos, int *out) {
    int n = 0;
    for (int q = 0; q < m->streams && n < m->top_k; q++) {
        long s = (long)j * m->streams + q, lap = s / t->n_layers;
        long row = (pos + lap * (t->n_rows / m->laps)) % t->n_rows;
        const int *sel = route_trace_row(t, (int)row, (int)(s % t->n_layers));
        for (int i = 0; i < t->top_k && n < m->top_k; i++) out[n++] = q * t->n_experts + sel[i];
    }
}

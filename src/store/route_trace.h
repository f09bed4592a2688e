/* route_trace.h - reading router traces (the K3_TRACE JSON-lines format, trace.h) and mapping
 * them onto a model of another shape.
 *
 * A trace is loaded whole: one row per line, in file order (a file may hold several runs: their
 * "pos" restarts). Every line must route the same layers with the same number of distinct
 * experts. Traces are outside input: a malformed line fails naming the file, the line and the
 * field, and sizes are bounded before anything is allocated from them.
 *
 * The mapping rule (route_trace_map), used to drive a model of another shape with recorded routing
 * (replay.h) and to replay a trace at K3's scale (bench/bench_stream_policy.c). A trace has
 * Lt layers, Et experts and top-kt; the model has Lm MoE layers, Em experts and top-km.
 *   - Each model layer takes r = ceil(km / kt) streams; stream s = j * r + q (q < r) of model
 *     MoE layer j replays trace layer s mod Lt. Streams that reuse a trace layer (lap
 *     s / Lt > 0) read it shifted by lap * (n_pos / laps) positions (laps = ceil(Lm * r / Lt)),
 *     so they are other tokens of the same real routing rather than copies.
 *   - Expert e of stream q becomes expert q * Et + e (needs Em >= r * Et); the streams'
 *     selections are concatenated in q order and the first km kept.
 *   - Model position p reads trace row (p + shift) mod n_pos: the trace repeats when it ends.
 * Each key of the model thus reuses exactly as one key of the trace does (the reuse distances
 * per key and the working set per token are the trace's); a layer uses r * Et of its Em experts.
 * A trace replayed on the model that wrote it maps to itself. */
#ifndef DF_ROUTE_TRACE_H
#define DF_ROUTE_TRACE_H

typedef struct {
    int n_rows, n_layers, top_k;
    int n_experts;   /* largest expert id + 1 */
    int *layer;      /* [n_layers] the trace's layer numbers, ascending */
    int *sel;        /* [n_rows][n_layers][top_k] */
} RouteTrace;

#define ROUTE_TRACE_MAX_ROWS (1 << 20)
#define ROUTE_TRACE_MAX_K 64
#define ROUTE_TRACE_MAX_EXPERTS 65536

int route_trace_load(RouteTrace *t, const char *path);
void route_trace_free(RouteTrace *t);
static inline const int *route_trace_row(const RouteTrace *t, int row, int layer) {
    return t->sel + ((long)row * t->n_layers + layer) * t->top_k;
}

/* The target shape of route_trace_map. */
typedef struct {
    int moe_layers, n_experts, top_k;
    int streams;     /* r */
    int laps;
} TraceMap;

/* Checks that the trace maps onto moe_layers x n_experts, top-k (message naming the trace's and
 * the model's sizes if not) and fills m. */
int route_trace_mapping(const RouteTrace *t, int moe_layers, int n_experts, int top_k, TraceMap *m, const char *path);
/* The top_k experts of model MoE layer j (0-based among MoE layers) at position pos >= 0. */
void route_trace_map(const RouteTrace *t, const TraceMap *m, int j, long pos, int *out);

#endif

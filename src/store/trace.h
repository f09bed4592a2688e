/* trace.h - router traces: which experts every token chose in every layer (K3_TRACE).
 *
 * A TraceSource wraps another ExpertSource: acquires pass through, and the selections the model
 * reports through `route` are written to a JSON-lines file, one line per position:
 *   {"pos":12,"layers":{"1":[5,17,...],"2":[...],...}}
 * where pos counts positions since the file was opened by this process and each layer lists the
 * position's top-k in routing order. Lines are appended, so traces of several runs accumulate.
 * These files drive the cache-policy replay (bench/bench_stream_policy.c). */
#ifndef DF_TRACE_H
#define DF_TRACE_H

#include <stdio.h>

#include "model/model.h"
#include "store/wrap.h"

typedef struct {
    ExpertWrap wrap;         /* first member: passes through what the trace does not change */
    FILE *f;
    char *path;
    int n_layers, top_k, rows, last_layer;
    int *sel;                /* [n_layers][cap][top_k] of the forward in progress */
    int cap;                 /* rows it holds per layer: grown for the longest pass so far */
    unsigned char *seen;     /* [n_layers] */
    long long pos;
} TraceSource;

/* Appends to path (K3_TRACE). */
int trace_open(TraceSource *t, ExpertSource *inner, const K3Config *c, const char *path);
/* Writes the last forward's lines and closes the file; -1 when any write failed. */
int trace_close(TraceSource *t);

#endif

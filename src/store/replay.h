/* replay.h - drives the expert store with recorded routing instead of the router (benchmark only).
 *
 * A ReplaySource wraps another ExpertSource: every MoE layer's selections are replaced by those
 * of a router trace (route_trace.h), mapped onto the model's shape by route_trace_map, with equal
 * weights; the inner source then reads and serves exactly those experts. Position p of the
 * sequence replays trace row p (the trace repeats when it ends). The model still computes every
 * expert it is given, so time and bytes are a real decode's, but its output is meaningless: it
 * is a benchmark of the store on real routing, never a way to generate text. Router lookahead's
 * guesses come from the real router and would be unrelated to the replayed choices, so a replay
 * passes none on unless it is told a recall R to simulate (K3_REPLAY_LOOKAHEAD): then a guess at
 * a layer is the replayed selection with each expert kept with probability R (a fixed hash of
 * position, layer and expert) and the others replaced by the real router's unrelated guesses,
 * which cost their reads as wrong guesses do. */
#ifndef DF_REPLAY_H
#define DF_REPLAY_H

#include "model/model.h"
#include "store/route_trace.h"
#include "store/wrap.h"

typedef struct {
    ExpertWrap wrap;         /* first member: passes through what the replay does not change */
    RouteTrace trace;
    TraceMap map;
    int first_moe;           /* the model's first MoE layer */
    double recall;           /* simulated router lookahead's recall, or < 0: no guesses */
    int pos;                 /* position of the forward's first row (from replace) */
} ReplaySource;

/* Loads the trace and checks it maps onto the model (a message naming the file if not).
 * lookahead_recall: in [0, 1] to simulate router lookahead of that recall, < 0 for none. */
int replay_open(ReplaySource *r, ExpertSource *inner, const K3Config *c, const char *path, double lookahead_recall);
void replay_close(ReplaySource *r);

#endif

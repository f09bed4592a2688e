/* gate.h - admission to the model's seats: up to `seats` generations run at once (the batch's
 * slots); a request either takes a free seat at once, waits in a bounded first-come-first-
 * served queue, or is turned away (the server answers 429). A waiter polls a cancel function
 * (its client may hang up) and leaves the queue when it fires.
 *
 * The gate also knows when a seat will probably be free, for the Retry-After of those turned
 * away (a newcomer turned away from a full queue gets in once a waiter moves up to a seat, so
 * that is the moment to retry). It is estimated from measured work, not from budgets, which
 * are often the whole context: each holder reports how many tokens it has generated and may
 * still generate and the pace it goes at; each finished generation adds its length to a running
 * mean. A holder is expected to generate the mean length (at least one more token, at most its
 * budget); before any generation has finished, as many tokens again as it has generated so far
 * (at least one). The estimate is the soonest holder's expected tokens x seconds per token: the
 * latest decode pace reported, else the prefill pace per prompt token, else 1 s. Thread-safe;
 * the gate owns nothing but its lock. */
#ifndef DF_GATE_H
#define DF_GATE_H

#include <pthread.h>
#include <stdint.h>

#define GATE_MAX_SEATS 64

typedef struct GateWaiter GateWaiter;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int seats, busy, queue_max, waiting;
    GateWaiter *head, *tail;
    int64_t left[GATE_MAX_SEATS];     /* tokens each holder may still generate; -1: seat free */
    int64_t done[GATE_MAX_SEATS];     /* tokens each holder has generated */
    double decode_pace, prefill_pace; /* seconds per token, latest measured; 0: none yet */
    double mean_tokens;               /* running mean length of finished generations */
    uint64_t finished;                /* generations that finished (0: no mean yet) */
} Gate;

enum { GATE_OK = 0, GATE_FULL = 1, GATE_CANCELLED = 2 };

#define GATE_RETRY_MAX_S 3600

/* seats: 1..GATE_MAX_SEATS. */
void gate_init(Gate *g, int seats, int queue_max);
void gate_destroy(Gate *g);
/* GATE_OK (the caller holds seat *seat), GATE_FULL, or GATE_CANCELLED. budget: the most tokens
 * the caller may generate once seated. */
int gate_acquire(Gate *g, int64_t budget, int (*cancel)(void *ctx), void *ctx, int *seat);
/* Hands the seat to the first waiter, or frees it. generated: the length of the generation when
 * it finished (it joins the mean), or -1 when it did not (cancelled, failed). */
void gate_release(Gate *g, int seat, int64_t generated);
/* A holder's progress: tokens it may still generate and has generated, its decode seconds per
 * token and its prefill seconds per prompt token so far (each 0 when not measured yet; the
 * last measured value is kept). Cheap: one lock. */
void gate_progress(Gate *g, int seat, int64_t left, int64_t done, double decode_pace, double prefill_pace);
/* Holders now, waiters now, and the latest decode pace (s/token, 0: none). */
void gate_state(Gate *g, int *busy, int *waiting, double *decode_pace);
/* Seconds until a seat is probably free for a newcomer (see above), rounded up, in
 * 1..GATE_RETRY_MAX_S. */
int gate_retry_after(Gate *g);

#endif

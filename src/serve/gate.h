/* gate.h - one generation at a time. A request either takes the gate at once, waits in a
 * bounded first-come-first-served queue, or is turned away (the server answers 429). A waiter
 * polls a cancel function (its client may hang up) and leaves the queue when it fires.
 * Thread-safe; the gate owns nothing but its lock. */
#ifndef DF_GATE_H
#define DF_GATE_H

#include <pthread.h>

typedef struct GateWaiter GateWaiter;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, queue_max, waiting;
    GateWaiter *head, *tail;
} Gate;

enum { GATE_OK = 0, GATE_FULL = 1, GATE_CANCELLED = 2 };

void gate_init(Gate *g, int queue_max);
void gate_destroy(Gate *g);
/* GATE_OK (the caller holds the gate), GATE_FULL, or GATE_CANCELLED. */
int gate_acquire(Gate *g, int (*cancel)(void *ctx), void *ctx);
/* Hands the gate to the first waiter, or frees it. */
void gate_release(Gate *g);

#endif

#include "serve/gate.h"

#include <math.h>
#include <time.h>

#include "util/clock.h"

struct GateWaiter {
    GateWaiter *next;
    int64_t budget;
    int seat;      /* -1 until granted */
};

void gate_init(Gate *g, int seats, int queue_max) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->seats = seats < 1 ? 1 : seats > GATE_MAX_SEATS ? GATE_MAX_SEATS : seats;
    g->busy = g->waiting = 0;
    g->queue_max = queue_max;
    g->head = g->tail = NULL;
    for (int i = 0; i < GATE_MAX_SEATS; i++) g->left[i] = -1, g->done[i] = 0;
    g->decode_pace = g->prefill_pace = 0;
    g->mean_tokens = 0;
    g->finished = 0;
}

void gate_destroy(Gate *g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static void unlink_waiter(Gate *g, GateWaiter *w) {
    GateWaiter **p = &g->head, *prev = NULL;
    while (*p && *p != w) prev = *p, p = &(*p)->next;
    if (!*p) return;
    *p = w->next;
    if (g->tail == w) g->tail = prev;
    g->waiting--;
}

static int free_seat(const Gate *g) {
    for (int i = 0; i < g->seats; i++)
        if (g->left[i] < 0) return i;
    return -1;
}

int gate_acquire(Gate *g, int64_t budget, int (*cancel)(void *ctx), void *ctx, int *seat) {
    pthread_mutex_lock(&g->mu);
    int s = g->waiting ? -1 : free_seat(g); /* first come, first served: no overtaking the queue */
    if (s >= 0) {
        g->left[s] = budget > 0 ? budget : 0;
        g->done[s] = 0;
        g->busy++;
        *seat = s;
        pthread_mutex_unlock(&g->mu);
        return GATE_OK;
    }
    if (g->waiting >= g->queue_max) {
        pthread_mutex_unlock(&g->mu);
        return GATE_FULL;
    }
    GateWaiter me = {NULL, budget, -1};
    if (g->tail) g->tail->next = &me;
    else g->head = &me;
    g->tail = &me;
    g->waiting++;
    int rc = GATE_OK;
    while (me.seat < 0) {
        struct timespec ts = df_deadline(0.2);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (me.seat < 0 && cancel && cancel(ctx)) {
            unlink_waiter(g, &me);
            rc = GATE_CANCELLED;
            break;
        }
    }
    if (rc == GATE_OK) *seat = me.seat;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* Finished generations weigh in a running mean: the latest quarter, the rest the history. */
static void count_finished(Gate *g, int64_t generated) {
    if (generated < 0) return;
    g->mean_tokens = g->finished ? 0.75 * g->mean_tokens + 0.25 * (double)generated : (double)generated;
    g->finished++;
}

void gate_release(Gate *g, int seat, int64_t generated) {
    if (seat < 0 || seat >= GATE_MAX_SEATS) return;
    pthread_mutex_lock(&g->mu);
    count_finished(g, generated);
    GateWaiter *w = g->head;
    g->done[seat] = 0;
    if (w) { /* hand over: the seat stays taken */
        unlink_waiter(g, w);
        w->seat = seat;
        g->left[seat] = w->budget > 0 ? w->budget : 0;
        pthread_cond_broadcast(&g->cv);
    } else {
        g->left[seat] = -1;
        g->busy--;
    }
    pthread_mutex_unlock(&g->mu);
}

void gate_progress(Gate *g, int seat, int64_t left, int64_t done, double decode_pace, double prefill_pace) {
    if (seat < 0 || seat >= GATE_MAX_SEATS) return;
    pthread_mutex_lock(&g->mu);
    g->left[seat] = left > 0 ? left : 0;
    g->done[seat] = done > 0 ? done : 0;
    if (decode_pace > 0) g->decode_pace = decode_pace;
    if (prefill_pace > 0) g->prefill_pace = prefill_pace;
    pthread_mutex_unlock(&g->mu);
}

void gate_state(Gate *g, int *busy, int *waiting, double *decode_pace) {
    pthread_mutex_lock(&g->mu);
    *busy = g->busy, *waiting = g->waiting, *decode_pace = g->decode_pace;
    pthread_mutex_unlock(&g->mu);
}

/* Tokens a holder is expected to generate still (see gate.h). */
static double expected_left(const Gate *g, int i) {
    double guess = g->finished ? g->mean_tokens - (double)g->done[i] : (double)g->done[i];
    if (guess > (double)g->left[i]) guess = (double)g->left[i];
    return guess < 1 ? 1 : guess;
}

int gate_retry_after(Gate *g) {
    pthread_mutex_lock(&g->mu);
    double soonest = -1;
    if (free_seat(g) < 0 || g->waiting)
        for (int i = 0; i < g->seats; i++)
            if (g->left[i] >= 0 && (soonest < 0 || expected_left(g, i) < soonest)) soonest = expected_left(g, i);
    double pace = g->decode_pace > 0 ? g->decode_pace : g->prefill_pace > 0 ? g->prefill_pace : 1.0;
    pthread_mutex_unlock(&g->mu);
    double s = ceil(soonest * pace);
    return s < 1 ? 1 : s > GATE_RETRY_MAX_S ? GATE_RETRY_MAX_S : (int)s;
}

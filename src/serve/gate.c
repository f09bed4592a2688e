#include "serve/gate.h"

#include <math.h>
#include <time.h>

struct GateWaiter {
    GateWaiter *next;
    int64_t budget;
    int granted;
};

void gate_init(Gate *g, int queue_max) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->busy = g->waiting = 0;
    g->queue_max = queue_max;
    g->head = g->tail = NULL;
    g->left = 0;
    g->decode_pace = g->prefill_pace = 0;
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

int gate_acquire(Gate *g, int64_t budget, int (*cancel)(void *ctx), void *ctx) {
    pthread_mutex_lock(&g->mu);
    if (!g->busy) {
        g->busy = 1;
        g->left = budget;
        pthread_mutex_unlock(&g->mu);
        return GATE_OK;
    }
    if (g->waiting >= g->queue_max) {
        pthread_mutex_unlock(&g->mu);
        return GATE_FULL;
    }
    GateWaiter me = {NULL, budget, 0};
    if (g->tail) g->tail->next = &me;
    else g->head = &me;
    g->tail = &me;
    g->waiting++;
    int rc = GATE_OK;
    while (!me.granted) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (!me.granted && cancel && cancel(ctx)) {
            unlink_waiter(g, &me);
            rc = GATE_CANCELLED;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void gate_release(Gate *g) {
    pthread_mutex_lock(&g->mu);
    GateWaiter *w = g->head;
    if (w) { /* hand over: the gate stays busy */
        unlink_waiter(g, w);
        w->granted = 1;
        g->left = w->budget;
        pthread_cond_broadcast(&g->cv);
    } else {
        g->busy = 0;
        g->left = 0;
    }
    pthread_mutex_unlock(&g->mu);
}

void gate_progress(Gate *g, int64_t left, double decode_pace, double prefill_pace) {
    pthread_mutex_lock(&g->mu);
    g->left = left > 0 ? left : 0;
    if (decode_pace > 0) g->decode_pace = decode_pace;
    if (prefill_pace > 0) g->prefill_pace = prefill_pace;
    pthread_mutex_unlock(&g->mu);
}

void gate_state(Gate *g, int *busy, int *waiting, double *decode_pace) {
    pthread_mutex_lock(&g->mu);
    *busy = g->busy, *waiting = g->waiting, *decode_pace = g->decode_pace;
    pthread_mutex_unlock(&g->mu);
}

int gate_retry_after(Gate *g) {
    pthread_mutex_lock(&g->mu);
    double tokens = g->busy ? (double)g->left : 0;
    for (const GateWaiter *w = g->head; w; w = w->next) tokens += (double)w->budget;
    double pace = g->decode_pace > 0 ? g->decode_pace : g->prefill_pace > 0 ? g->prefill_pace : 1.0;
    pthread_mutex_unlock(&g->mu);
    double s = ceil(tokens * pace);
    return s < 1 ? 1 : s > GATE_RETRY_MAX_S ? GATE_RETRY_MAX_S : (int)s;
}

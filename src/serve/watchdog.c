/* watchdog.c - per-phase connection deadlines and eviction (see watchdog.h). */
#include "serve/watchdog.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "util/clock.h"
#include "util/err.h"

struct Watch {
    Watch *next, *prev;
    int fd;
    WatchPhase phase;
    double since;    /* when the phase began */
    int cut;         /* shut down already: its thread is closing it */
};

static double limit_of(const Watchdog *w, WatchPhase p) {
    switch (p) {
    case WATCH_HEADERS: return w->lim.header_s;
    case WATCH_BODY: return w->lim.body_s;
    case WATCH_IDLE: return w->lim.idle_s;
    case WATCH_BUSY: break;
    }
    return 0;
}

/* shutdown() wakes the connection's thread, which then closes the socket itself; the watch is
 * removed (under the lock) before that close, so the fd here is always the connection's own. */
static void cut(Watch *x) {
    shutdown(x->fd, SHUT_RDWR);
    x->cut = 1;
}

/* Every quarter second: cut the connections past their deadline. */
static void *patrol(void *arg) {
    Watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        double now = df_now();
        for (Watch *x = w->head; x; x = x->next)
            if (!x->cut && x->phase != WATCH_BUSY && now - x->since > limit_of(w, x->phase)) {
                cut(x);
                w->expired++;
            }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int watchdog_start(Watchdog *w, const WatchLimits *lim) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->head = NULL;
    w->lim = *lim;
    w->open = 0;
    w->stop = 0;
    w->expired = w->evicted = w->refused = 0;
    int err = pthread_create(&w->thread, NULL, patrol, w);
    if (!err) return 0;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return df_fail("serve: cannot start the watchdog thread: %s", strerror(err));
}

void watchdog_stop(Watchdog *w) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    while (w->head) {
        Watch *x = w->head;
        w->head = x->next;
        free(x);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* The connection to give up for a newcomer: the longest waiting for its request, else the
 * longest idle; NULL when all are busy. */
static Watch *victim(Watchdog *w) {
    Watch *waiting = NULL, *idle = NULL;
    for (Watch *x = w->head; x; x = x->next) {
        if (x->cut || x->phase == WATCH_BUSY) continue;
        Watch **best = x->phase == WATCH_IDLE ? &idle : &waiting;
        if (!*best || x->since < (*best)->since) *best = x;
    }
    return waiting ? waiting : idle;
}

static int live(const Watchdog *w) {
    int n = 0;
    for (const Watch *x = w->head; x; x = x->next) n += !x->cut;
    return n;
}

Watch *watch_add(Watchdog *w, int fd) {
    Watch *x = df_calloc(1, sizeof *x);
    x->fd = fd;
    pthread_mutex_lock(&w->mu);
    if (live(w) >= w->lim.max_connections) {
        Watch *v = victim(w);
        if (v) cut(v), w->evicted++;
        else cut(x), w->refused++;
    }
    x->phase = WATCH_HEADERS;
    x->since = df_now();
    x->next = w->head;
    if (w->head) w->head->prev = x;
    w->head = x;
    w->open++;
    pthread_mutex_unlock(&w->mu);
    return x;
}

void watch_remove(Watchdog *w, Watch *x) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    if (x->prev) x->prev->next = x->next;
    else w->head = x->next;
    if (x->next) x->next->prev = x->prev;
    w->open--;
    pthread_mutex_unlock(&w->mu);
    free(x);
}

void watch_phase(Watchdog *w, Watch *x, WatchPhase p) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    x->phase = p;
    x->since = df_now();
    pthread_mutex_unlock(&w->mu);
}

void watch_request_line(Watchdog *w, Watch *x) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    if (x->phase == WATCH_IDLE) {
        x->phase = WATCH_HEADERS;
        x->since = df_now();
    }
    pthread_mutex_unlock(&w->mu);
}

void watchdog_counts(Watchdog *w, int *open, unsigned long *expired, unsigned long *evicted, unsigned long *refused) {
    pthread_mutex_lock(&w->mu);
    *open = w->open;
    *expired = w->expired, *evicted = w->evicted, *refused = w->refused;
    pthread_mutex_unlock(&w->mu);
}

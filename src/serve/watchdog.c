#include "serve/watchdog.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "util/err.h"

struct Watch {
    Watch *next, *prev;
    int fd;
    double deadline; /* 0: none */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Every quarter second: cut the connections past their deadline. shutdown() wakes the
 * connection's thread, which then closes the socket itself; the watch is removed (under the
 * lock) before that close, so the fd here is always the connection's own. */
static void *patrol(void *arg) {
    Watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        double now = now_s();
        for (Watch *x = w->head; x; x = x->next)
            if (x->deadline > 0 && now > x->deadline) {
                shutdown(x->fd, SHUT_RDWR);
                x->deadline = 0;
                w->expired++;
            }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int watchdog_start(Watchdog *w, double limit_s) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->head = NULL;
    w->limit_s = limit_s;
    w->stop = 0;
    w->expired = 0;
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

Watch *watch_add(Watchdog *w, int fd) {
    Watch *x = df_calloc(1, sizeof *x);
    x->fd = fd;
    pthread_mutex_lock(&w->mu);
    x->deadline = now_s() + w->limit_s;
    x->next = w->head;
    if (w->head) w->head->prev = x;
    w->head = x;
    pthread_mutex_unlock(&w->mu);
    return x;
}

void watch_remove(Watchdog *w, Watch *x) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    if (x->prev) x->prev->next = x->next;
    else w->head = x->next;
    if (x->next) x->next->prev = x->prev;
    pthread_mutex_unlock(&w->mu);
    free(x);
}

void watch_arm(Watchdog *w, Watch *x, int on) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    x->deadline = on ? now_s() + w->limit_s : 0;
    pthread_mutex_unlock(&w->mu);
}

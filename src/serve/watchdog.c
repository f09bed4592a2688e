/* watchdog.c - per-phase connection deadlines and eviction (see watchdog.h). */
#include "serve/watchdog.h"

#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "util/clock.h"
#include "util/err.h"

/* A client's address: the IPv4 or IPv6 bytes (an unknown address is all zeros). */
typedef struct {
    unsigned char family, len, bytes[16];
} Peer;

struct Watch {
    Watch *next, *prev;
    int fd;
    Peer peer;
    WatchPhase phase;
    double since;    /* when the phase began */
    int cut;         /* shut down already: its thread is closing it */
    WatchVerdict verdict;
};

static Peer peer_of(const struct sockaddr *a) {
    Peer p = {0, 0, {0}};
    if (a && a->sa_family == AF_INET) {
        p.family = AF_INET, p.len = 4;
        memcpy(p.bytes, &((const struct sockaddr_in *)a)->sin_addr, 4);
    } else if (a && a->sa_family == AF_INET6) {
        p.family = AF_INET6, p.len = 16;
        memcpy(p.bytes, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    }
    return p;
}

static int same_peer(const Peer *a, const Peer *b) {
    return a->family == b->family && a->len == b->len && !memcmp(a->bytes, b->bytes, a->len);
}

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
        struct timespec ts = df_deadline(0.25);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        double now = df_now();
        for (Watch *x = w->head; x; x = x->next)
            if (!x->cut && x->phase != WATCH_BUSY && now - x->since > limit_of(w, x->phase)) {
                cut(x);
                w->n.expired++;
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
    w->stop = 0;
    memset(&w->n, 0, sizeof w->n);
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
        if (x->cut || x->phase == WATCH_BUSY || x->verdict != WATCH_ADMITTED) continue;
        Watch **best = x->phase == WATCH_IDLE ? &idle : &waiting;
        if (!*best || x->since < (*best)->since) *best = x;
    }
    return waiting ? waiting : idle;
}

/* Connections that count toward the limits: not cut, not refused; from peer p only when p is
 * not NULL. */
static int live(const Watchdog *w, const Peer *p) {
    int n = 0;
    for (const Watch *x = w->head; x; x = x->next)
        n += !x->cut && x->verdict == WATCH_ADMITTED && (!p || same_peer(&x->peer, p));
    return n;
}

/* The verdict on a newcomer from p; may cut another connection to make room. */
static WatchVerdict admit(Watchdog *w, const Peer *p) {
    if (live(w, p) >= w->lim.max_per_client) { /* (its own connections may be a burst it is sending now: none is cut) */
        w->n.refused_client++;
        return WATCH_REFUSED_CLIENT;
    }
    if (live(w, NULL) < w->lim.max_connections) return WATCH_ADMITTED;
    Watch *v = victim(w);
    if (!v) {
        w->n.refused_full++;
        return WATCH_REFUSED_FULL;
    }
    cut(v);
    w->n.evicted++;
    return WATCH_ADMITTED;
}

Watch *watch_add(Watchdog *w, int fd, const struct sockaddr *addr) {
    Watch *x = df_calloc(1, sizeof *x);
    x->fd = fd;
    x->peer = peer_of(addr);
    pthread_mutex_lock(&w->mu);
    x->verdict = admit(w, &x->peer);
    x->phase = WATCH_HEADERS;
    x->since = df_now();
    x->next = w->head;
    if (w->head) w->head->prev = x;
    w->head = x;
    w->n.open++;
    pthread_mutex_unlock(&w->mu);
    return x;
}

WatchVerdict watch_verdict(Watchdog *w, const Watch *x) {
    if (!x) return WATCH_ADMITTED;
    pthread_mutex_lock(&w->mu);
    WatchVerdict v = x->verdict;
    pthread_mutex_unlock(&w->mu);
    return v;
}

void watch_remove(Watchdog *w, Watch *x) {
    if (!x) return;
    pthread_mutex_lock(&w->mu);
    if (x->prev) x->prev->next = x->next;
    else w->head = x->next;
    if (x->next) x->next->prev = x->prev;
    w->n.open--;
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

WatchCounts watchdog_counts(Watchdog *w) {
    pthread_mutex_lock(&w->mu);
    WatchCounts n = w->n;
    pthread_mutex_unlock(&w->mu);
    return n;
}

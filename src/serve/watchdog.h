/* watchdog.h - a deadline for receiving each request. The idle timeout alone lets a client keep
 * a connection (and its thread) forever by sending one byte every few seconds; the watchdog
 * shuts down any connection whose request has not fully arrived within the limit. A connection
 * is armed when it opens and after each answer, disarmed while its request is being answered.
 * Thread-safe; owns its watches, which live from watch_add to watch_remove. */
#ifndef DF_WATCHDOG_H
#define DF_WATCHDOG_H

#include <pthread.h>

typedef struct Watch Watch;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    Watch *head;
    double limit_s;
    int stop;
    unsigned long expired;   /* connections cut so far */
} Watchdog;

/* Starts the patrol thread. Returns 0, or -1 with a message (nothing to stop then). */
int watchdog_start(Watchdog *w, double limit_s);
void watchdog_stop(Watchdog *w);
/* A new connection on socket fd, armed. */
Watch *watch_add(Watchdog *w, int fd);
/* The connection is closing: forget it (before its socket is closed). */
void watch_remove(Watchdog *w, Watch *x);
/* on: the deadline restarts now; off: no deadline. */
void watch_arm(Watchdog *w, Watch *x, int on);

#endif

/* watchdog.h - deadlines for every phase of a connection, and room for new clients.
 *
 * The idle timeout alone lets a client keep a connection (and its thread) forever by sending one
 * byte every few seconds, and a crowd of such clients can hold every connection the server
 * allows. So each connection is in one phase with its own deadline, measured from when the phase
 * began (not from the last byte):
 *   HEADERS  a new connection, or a request line read on a kept-alive one: the request line and
 *            headers must be in within header_s;
 *   BODY     the headers are in: the body must be in within body_s;
 *   BUSY     the request is being answered: no deadline (a generation may be long);
 *   IDLE     answered, kept alive for the next request: at most idle_s.
 * A connection past its deadline is shut down. When a new connection makes more than
 * max_connections, the one that has waited longest without its request arriving (HEADERS or
 * BODY, else the longest IDLE) is shut down to make room, so trickling clients cannot lock new
 * ones out; when every connection is BUSY the new one is refused instead.
 * Thread-safe; owns its watches, which live from watch_add to watch_remove. */
#ifndef DF_WATCHDOG_H
#define DF_WATCHDOG_H

#include <pthread.h>

typedef struct Watch Watch;

typedef enum { WATCH_HEADERS, WATCH_BODY, WATCH_BUSY, WATCH_IDLE } WatchPhase;

typedef struct {
    double header_s, body_s, idle_s;
    int max_connections;
} WatchLimits;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    Watch *head;
    WatchLimits lim;
    int open;                /* connections watched now */
    int stop;
    unsigned long expired;   /* connections cut for a missed deadline */
    unsigned long evicted;   /* cut to make room for a new connection */
    unsigned long refused;   /* new connections refused: every other one was busy */
} Watchdog;

/* Starts the patrol thread. Returns 0, or -1 with a message (nothing to stop then). */
int watchdog_start(Watchdog *w, const WatchLimits *lim);
void watchdog_stop(Watchdog *w);
/* A new connection on socket fd, in phase HEADERS. May shut down another connection to make
 * room, or this one when there is none to make. */
Watch *watch_add(Watchdog *w, int fd);
/* The connection is closing: forget it (before its socket is closed). x may be NULL. */
void watch_remove(Watchdog *w, Watch *x);
/* The connection enters phase p; its deadline restarts now. x may be NULL. */
void watch_phase(Watchdog *w, Watch *x, WatchPhase p);
/* A request line arrived: an IDLE connection enters HEADERS (its header deadline starts now);
 * a connection in another phase is left as it is. x may be NULL. */
void watch_request_line(Watchdog *w, Watch *x);
/* Counters, read under the lock. */
void watchdog_counts(Watchdog *w, int *open, unsigned long *expired, unsigned long *evicted, unsigned long *refused);

#endif

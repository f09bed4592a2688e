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
 * ones out.
 *
 * Refusals are answered, never silent: a new connection beyond max_per_client from its address,
 * or beyond max_connections when every other one is BUSY, is admitted but marked refused (it
 * does not count toward either limit); the HTTP layer answers its request with 429 (its
 * client's limit) or 503 (the server's) and closes it. Such a connection that sends nothing is
 * cut at its header deadline like any other.
 * Thread-safe; owns its watches, which live from watch_add to watch_remove. */
#ifndef DF_WATCHDOG_H
#define DF_WATCHDOG_H

#include <pthread.h>
#include <sys/socket.h>

typedef struct Watch Watch;

typedef enum { WATCH_HEADERS, WATCH_BODY, WATCH_BUSY, WATCH_IDLE } WatchPhase;

typedef enum { WATCH_ADMITTED, WATCH_REFUSED_CLIENT, WATCH_REFUSED_FULL } WatchVerdict;

typedef struct {
    double header_s, body_s, idle_s;
    int max_connections;
    int max_per_client;      /* connections from one address */
} WatchLimits;

/* What the watchdog counted (watchdog_counts). */
typedef struct {
    int open;                /* connections watched now */
    unsigned long expired;   /* connections cut for a missed deadline */
    unsigned long evicted;   /* cut to make room for a new connection */
    unsigned long refused_full;   /* refused (503): every other connection was busy */
    unsigned long refused_client; /* refused (429): the client's address had max_per_client */
} WatchCounts;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    Watch *head;
    WatchLimits lim;
    int stop;
    WatchCounts n;
} Watchdog;

/* Starts the patrol thread. Returns 0, or -1 with a message (nothing to stop then). */
int watchdog_start(Watchdog *w, const WatchLimits *lim);
void watchdog_stop(Watchdog *w);
/* A new connection on socket fd from address addr (NULL: unknown, counted as one address), in
 * phase HEADERS. May shut down another connection to make room, or mark this one refused. */
Watch *watch_add(Watchdog *w, int fd, const struct sockaddr *addr);
/* Whether the connection was admitted, or refused and why (fixed at watch_add). x may be NULL. */
WatchVerdict watch_verdict(Watchdog *w, const Watch *x);
/* The connection is closing: forget it (before its socket is closed). x may be NULL. */
void watch_remove(Watchdog *w, Watch *x);
/* The connection enters phase p; its deadline restarts now. x may be NULL. */
void watch_phase(Watchdog *w, Watch *x, WatchPhase p);
/* A request line arrived: an IDLE connection enters HEADERS (its header deadline starts now);
 * a connection in another phase is left as it is. x may be NULL. */
void watch_request_line(Watchdog *w, Watch *x);
/* The counters, read under the lock. */
WatchCounts watchdog_counts(Watchdog *w);

#endif

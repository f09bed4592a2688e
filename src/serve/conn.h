/* conn.h - what the HTTP layer (http.c) and the endpoints (endpoints.c) share: the server and
 * one request's state. Internal to src/serve. A Req lives from the first callback of a request
 * to MHD's completion notice and owns its body, exchange and event buffer. */
#ifndef DF_SERVE_CONN_H
#define DF_SERVE_CONN_H

#include <microhttpd.h>
#include <pthread.h>

#include "engine/session.h"
#include "serve/exchange.h"
#include "serve/gate.h"
#include "serve/memo.h"
#include "serve/server.h"
#include "serve/watchdog.h"
#include "text/strbuf.h"

typedef struct {
    ServeConfig cfg;
    Engine *e;
    Session session;   /* guarded by gate */
    Gate gate;
    Memo *memo;
    ExchangeEnv env;
    Watchdog dog;      /* request-arrival deadlines */
    FILE *log;
    volatile int stopping;
    pthread_mutex_t stats_mu;
    uint64_t requests, generations, tokens, disconnects, memo_hits, busy;
    uint64_t admitted;  /* generations given the model so far (guarded by gate) */
} Server;

typedef enum { ROUTE_MODELS, ROUTE_MODEL, ROUTE_CHAT, ROUTE_COMPLETIONS } Route;

typedef struct {
    Server *srv;
    struct MHD_Connection *conn;
    Route route;
    char method[16], path[96];
    double t0;
    StrBuf body;
    int too_large, responded, status;
    int gone;          /* the client hung up */
    int holds_gate;
    uint64_t seq;      /* this request's turn at the model (1-based), 0 if none */
    double wait_s;     /* time spent waiting for the model */
    int have_x, stream, include_usage;
    Exchange x;
    StrBuf sse;        /* stream bytes not yet handed to MHD */
    size_t sse_at;
    int sse_state;     /* 0 start, 1 tokens, 2 [DONE] queued, 3 ended */
} Req;

/* Queues a response and records its status. body is malloc'd and taken over. */
enum MHD_Result conn_respond(Req *q, int status, char *body, const char *content_type, const char *hname,
                             const char *hvalue);
enum MHD_Result conn_respond_error(Req *q, const ApiError *err);
/* Nonzero once the client has closed its side (or the server is stopping). */
int conn_cancelled(void *req);
void conn_reset_timeout(Req *q);

/* endpoints.c */
enum MHD_Result endpoint_models(Req *q, int one);
enum MHD_Result endpoint_generate(Req *q);
void endpoint_release(Req *q);

#endif

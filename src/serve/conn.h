/* conn.h - what the HTTP layer (http.c) and the endpoints (endpoints.c) share: the server and
 * one request's state. Internal to src/serve. A Req lives from the first callback of a request
 * to MHD's completion notice and owns its body, exchange and event buffer. */
#ifndef DF_SERVE_CONN_H
#define DF_SERVE_CONN_H

#include <microhttpd.h>
#include <pthread.h>

#include "serve/anthropic.h"
#include "serve/exchange.h"
#include "serve/gate.h"
#include "serve/memo.h"
#include "serve/route.h"
#include "serve/server.h"
#include "engine/scheduler.h"
#include "serve/watchdog.h"
#include "text/strbuf.h"

/* Requests are counted by status: 200, 204, 400, 401, 404, 405, 413, 429, 499, 500, other. */
#define STATUS_SLOTS 11
int status_slot(int status);
/* The status a slot counts; 0 for the last ("other"). */
int status_of_slot(int slot);

/* What the server counts (for its summary line and /metrics). */
typedef struct {
    uint64_t requests, generations, tokens, disconnects, memo_hits, busy;
    uint64_t by_status[STATUS_SLOTS];  /* requests answered, by status_slot */
    uint64_t prompt_tokens, cached_tokens; /* of the generations */
    double prefill_s, decode_s;        /* model time of the generations */
    uint64_t decode_tokens;            /* tokens that decode time produced */
} ServerStats;

typedef struct {
    ServeConfig cfg;
    Engine *e;
    Scheduler *sched;  /* runs the generations, `parallel` at a time */
    Gate gate;         /* a seat per slot, and the bounded queue */
    Memo *memo;
    ExchangeEnv env;
    Watchdog dog;      /* connection phase deadlines, room for new clients */
    FILE *log;
    volatile int stopping;
    pthread_mutex_t stats_mu;
    ServerStats stats;  /* under stats_mu */
    uint64_t admitted;  /* generations given the model so far (atomic) */
} Server;


typedef struct {
    Server *srv;
    struct MHD_Connection *conn;
    Route route;
    char method[16], path[96];
    int route_known;   /* route is set: the path exists (errors then take its API's shape) */
    int refusal;       /* decided from the headers, sent once the body is in: 0 none */
    ApiError refusal_err;
    const char *refusal_hname, *refusal_hvalue;
    int preflight;     /* an OPTIONS request: answered with the CORS headers */
    double t0;
    StrBuf body;
    int too_large, responded, status;
    int gone;          /* the client hung up */
    int holds_gate, seat; /* a seat at the model (gate.h) */
    uint64_t seq;      /* this request's turn at the model (1-based), 0 if none */
    double wait_s;     /* time spent waiting for a seat */
    int have_x, stream, include_usage;
    int anthropic;     /* /v1/messages: Anthropic's shapes */
    AnthropicStream ast;
    int lp_offset;     /* streamed completion with logprobs: text offset of the next token */
    size_t calls_sent; /* streamed tool calls sent so far */
    Exchange x;
    StrBuf sse;        /* stream bytes not yet handed to MHD */
    size_t sse_at;
    int sse_state;     /* 0 start, 1 tokens, 2 [DONE] queued, 3 ended */
} Req;

/* Adds the headers every response carries (CORS, when --cors-origin is set), queues resp (taken
 * over) with status and records that q was answered. */
enum MHD_Result conn_queue(Req *q, int status, struct MHD_Response *resp);
/* Queues a response and records its status. body is malloc'd and taken over. */
enum MHD_Result conn_respond(Req *q, int status, char *body, const char *content_type, const char *hname,
                             const char *hvalue);
enum MHD_Result conn_respond_error(Req *q, const ApiError *err);
/* Nonzero once the client has closed its side (or the server is stopping). */
int conn_cancelled(void *req);
void conn_reset_timeout(Req *q);

/* metrics.c: the Prometheus text of /metrics (new string). */
char *metrics_text(Server *srv);

/* endpoints.c */
enum MHD_Result endpoint_models(Req *q, int one);
enum MHD_Result endpoint_health(Req *q);
enum MHD_Result endpoint_metrics(Req *q);
enum MHD_Result endpoint_generate(Req *q);
void endpoint_release(Req *q);

#endif

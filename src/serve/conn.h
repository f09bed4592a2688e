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
#include "serve/responses.h"
#include "serve/route.h"
#include "serve/server.h"
#include "engine/scheduler.h"
#include "serve/watchdog.h"
#include "text/strbuf.h"

/* Requests are counted by status: 200, 204, 400, 401, 404, 405, 413, 429, 499, 500, 503, other. */
#define STATUS_SLOTS 12
int status_slot(int status);
/* The status a slot counts; 0 for the last ("other"). */
int status_of_slot(int slot);

/* A latency histogram in Prometheus' form: counts per upper bound (cumulated when printed). */
#define HISTOGRAM_BOUNDS 19
extern const double histogram_bounds[HISTOGRAM_BOUNDS];
typedef struct {
    uint64_t count[HISTOGRAM_BOUNDS + 1]; /* the last: above every bound */
    double sum;
    uint64_t n;
} Histogram;
void histogram_observe(Histogram *h, double seconds);

/* What the server counts (for its summary line and /metrics). */
typedef struct {
    uint64_t requests, generations, tokens, disconnects, memo_hits, busy;
    uint64_t shutdown_cut;             /* generations ended by the server's shutdown */
    uint64_t refused_draining;         /* requests refused (503) while the server was stopping */
    Histogram ttft, per_token, e2e;    /* seconds: request to first token, per token after it, request to last */
    uint64_t by_status[STATUS_SLOTS];  /* requests answered, by status_slot */
    uint64_t prompt_tokens, cached_tokens; /* of the generations */
    double prefill_s, decode_s;        /* model time of the generations */
    uint64_t decode_tokens;            /* tokens that decode time produced */
    uint64_t prefill_tokens;           /* prompt tokens fed (not reused), whose time is prefill_s */
    double last_prefill_rate;          /* prompt tokens per second of the latest prefill (0: none yet) */
} ServerStats;

typedef struct {
    ServeConfig cfg;
    Engine *e;
    Scheduler *sched;  /* runs the generations, `parallel` at a time */
    PromptCache *cache; /* prompts' States on disk (DELTAFIN_PROMPT_CACHE), or NULL */
    Gate gate;         /* a seat per slot, and the bounded queue */
    Memo *memo;
    ExchangeEnv env;
    Watchdog dog;      /* connection phase deadlines, room for new clients */
    int dog_started, gate_started;
    FILE *log;
    struct VocabTrie *trie; /* the vocabulary for constrained decoding, shared by every request */
    struct MHD_Daemon *daemon;
    volatile int draining;  /* stopping: no new generations; the running ones may finish */
    volatile int stopping;  /* the drain is over: the running generations end now */
    int active;             /* generation requests being answered (atomic) */
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
    int close_after;   /* the answer says "Connection: close" (a refused connection, a stopping server) */
    int anthropic_api; /* an Anthropic route, or a client that sent anthropic-version: errors in its shape */
    int cut_by_shutdown; /* the generation was ended by the server's shutdown */
    char retry_after[16], detail[24]; /* a refusal's header value and the number its message names */
    int counted_active; /* counted in Server.active */
    const char *why;   /* a refusal's reason for the log line, or NULL */
    int gone;          /* the client hung up */
    int holds_gate, seat; /* a seat at the model (gate.h) */
    uint64_t seq;      /* this request's turn at the model (1-based), 0 if none */
    double wait_s;     /* time spent waiting for a seat */
    int have_x, stream, include_usage;
    int anthropic;     /* /v1/messages: Anthropic's shapes */
    AnthropicStream ast;
    int responses;     /* /v1/responses: the Responses API's shapes */
    ResponsesStream rst;
    json_t *echo;      /* what a Responses answer repeats of the request (owned), or NULL */
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
enum MHD_Result endpoint_count_tokens(Req *q);
void endpoint_release(Req *q);

#endif

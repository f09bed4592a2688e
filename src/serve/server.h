/* server.h - `deltafin serve`: the OpenAI-compatible HTTP server (product.md "Serving").
 *
 * GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions, POST /v1/completions (OpenAI),
 * POST /v1/messages (Anthropic), whole or streamed as server-sent events; GET /health and
 * /metrics (Prometheus text) for operators. Up to `parallel` generations are decoded together
 * (engine/scheduler.h); other requests wait in a bounded queue or get 429. Each connection has
 * its own thread, so a slow client delays nobody but itself; deadlines per phase of a connection and room kept for
 * new clients (watchdog.h) stop slow clients from holding connections. HTTP/1.1 keep-alive;
 * CORS when asked for. One log line per request goes to the log stream. */
#ifndef DF_SERVER_H
#define DF_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "text/tokenizer.h"

/* Rows of a prompt read per pass while other generations decode (scheduler.h). */
#define SERVE_PREFILL_ROWS 16

typedef struct {
    const char *host;     /* an IP address; "localhost" means 127.0.0.1 */
    int port;             /* 0: any free port (printed at start) */
    const char *api_key;  /* NULL: no authentication */
    int parallel;         /* generations decoded together (the scheduler's slots) */
    int queue;            /* requests that may wait for a slot; 0: answer 429 at once */
    int64_t max_tokens;   /* K3_SERVER_MAX_TOKENS, -1 for none */
    int memo_entries;     /* K3_RESPONSE_MEMO_ENTRIES */
    int timeout_s;        /* seconds a kept-alive connection may wait for its next request */
    int header_timeout_s; /* seconds a request's line and headers may take to arrive */
    int body_timeout_s;   /* seconds its body may take once the headers are in */
    size_t max_body;      /* bytes; larger bodies get 413 before they are read */
    int max_connections;
    int max_per_client;   /* connections from one address */
    const char *cors_origin; /* Access-Control-Allow-Origin for browsers; NULL: no CORS */
    int prompt_snapshot;  /* K3_PROMPT_SNAPSHOT: keep the decode state at the end of each prompt */
    const char *effort;   /* K3_REASONING_EFFORT: a chat request's thinking effort when it names none; NULL: max */
} ServeConfig;

/* Checks what can be checked before the model loads (the address). Returns 0 or -1. */
int serve_check(const ServeConfig *cfg);

/* Serves until SIGINT or SIGTERM, then prints a summary. Borrows e and tok. Returns 0, or -1
 * with a message when the server cannot start. */
int serve_run(Engine *e, const Tokenizer *tok, const ServeConfig *cfg, FILE *log);

#endif

/* server.h - `deltafin serve`: the OpenAI-compatible HTTP server (product.md "Serving").
 *
 * GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions, POST /v1/completions,
 * POST /v1/responses (OpenAI), POST /v1/messages and /v1/messages/count_tokens (Anthropic),
 * whole or streamed as server-sent events; GET /health and /metrics (Prometheus text) for
 * operators. Up to `parallel` generations are decoded together (engine/scheduler.h); other
 * requests wait in a bounded queue or get 429. Each connection has its own thread, so a slow
 * client delays nobody but itself; deadlines per phase of a connection and room kept for new
 * clients (watchdog.h) stop slow clients from holding connections, and every connection turned
 * away gets an HTTP answer (429 or 503 with Retry-After). HTTP/1.1 keep-alive; CORS when asked
 * for. One log line per request goes to the log stream.
 *
 * The library handles no signal: the caller binds the address first (serve_listen, before the
 * model loads, so a busy port fails at once), then serve_run serves until its stop descriptor
 * becomes readable. A first byte there starts the shutdown: no new connections or generations,
 * the running ones may finish for up to drain_s seconds; then (or at a second byte) every
 * generation still running ends with a final error event (streams) or a 503 (whole answers),
 * counted as cut by the shutdown. */
#ifndef DF_SERVER_H
#define DF_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "text/tokenizer.h"

/* Rows of a prompt read per pass while other generations decode (scheduler.h). */
#define SERVE_PREFILL_ROWS 16
/* Prompts shorter than this are not kept in the prompt cache: reading them again costs less than
 * the file. */
#define SERVE_CACHE_MIN_TOKENS 32
/* The longest served model name (--alias). */
#define SERVE_MODEL_ID_MAX 128

typedef struct {
    const char *host;     /* an IP address; "localhost" means 127.0.0.1 */
    int port;             /* 0: any free port (printed at start) */
    const char *model_id; /* the name clients use for the model (--alias), 1..SERVE_MODEL_ID_MAX bytes */
    const char *api_key;  /* NULL: no authentication */
    int parallel;         /* generations decoded together (the scheduler's slots) */
    int queue;            /* requests that may wait for a slot; 0: answer 429 at once */
    int64_t max_tokens;   /* K3_SERVER_MAX_TOKENS, -1 for none */
    int64_t answer_tokens; /* a chat's limit when the request sets none (DELTAFIN_ANSWER_TOKENS); -1: none */
    int repeat_stop;      /* DELTAFIN_REPEAT_STOP: end chats caught in a loop (engine/repeat.h) */
    int memo_entries;     /* K3_RESPONSE_MEMO_ENTRIES */
    int timeout_s;        /* seconds a kept-alive connection may wait for its next request */
    int header_timeout_s; /* seconds a request's line and headers may take to arrive */
    int body_timeout_s;   /* seconds its body may take once the headers are in */
    int drain_s;          /* seconds running generations may take to finish once stopping */
    size_t max_body;      /* bytes; larger bodies get 413 before they are read */
    int max_connections;
    int max_per_client;   /* connections from one address */
    const char *cors_origin; /* Access-Control-Allow-Origin for browsers; NULL: no CORS */
    int prompt_snapshot;  /* K3_PROMPT_SNAPSHOT: keep the decode state at the end of each prompt */
    const char *prompt_cache; /* DELTAFIN_PROMPT_CACHE: the folder of prompts' States (engine/prompt_cache.h); NULL: none */
    uint64_t prompt_cache_bytes; /* DELTAFIN_PROMPT_CACHE_GB */
    int prompt_cache_optional;   /* the folder is the default one: when it cannot be used the server
                                  * runs without a prompt cache (and says so) instead of failing */
    const char *effort;   /* K3_REASONING_EFFORT: a chat request's thinking effort when it names none; NULL: max */
} ServeConfig;

/* Binds and listens on cfg's host and port (0: a free one, which serve_run prints). Returns 0
 * with *fd (the caller's until handed to serve_run), or -1 with a message (the address is not an
 * IP address, or cannot be bound: in use, not this machine's...). */
int serve_listen(const ServeConfig *cfg, int *fd);

/* Serves on listen_fd (taken over: closed before returning) until stop_fd is readable (see
 * above), then prints a summary. Borrows e and tok. Returns 0, or -1 with a message when the
 * server cannot start. */
int serve_run(Engine *e, const Tokenizer *tok, const ServeConfig *cfg, int listen_fd, int stop_fd, FILE *log);

#endif

/* http.c - the HTTP side of the server on libmicrohttpd: listening, routing, authentication,
 * body limits, per-request log lines and the shutdown summary. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/anthropic.h"
#include "serve/conn.h"
#include "text/vocab_trie.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/platform.h"

/* Connections waiting to be accepted (listen's backlog): those that come while the model loads. */
#define LISTEN_BACKLOG 128
/* Seconds the generations cut by the shutdown have to send their final events. */
#define FINAL_EVENTS_S 2.0

/* Slots of Server.by_status: the statuses the server sends, then everything else. */
static const int counted_status[STATUS_SLOTS - 1] = {200, 204, 400, 401, 404, 405, 413, 429, 499, 500, 503};

int status_slot(int status) {
    for (int i = 0; i < STATUS_SLOTS - 1; i++)
        if (counted_status[i] == status) return i;
    return STATUS_SLOTS - 1;
}

int status_of_slot(int slot) { return slot < STATUS_SLOTS - 1 ? counted_status[slot] : 0; }

static Watch *watch_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void enter(Server *srv, struct MHD_Connection *c, WatchPhase p) { watch_phase(&srv->dog, watch_of(c), p); }

static void add_headers(Req *q, struct MHD_Response *resp) {
    const char *origin = q->srv->cfg.cors_origin;
    if (!origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After");
    if (strcmp(origin, "*") != 0) MHD_add_response_header(resp, "Vary", "Origin");
}

enum MHD_Result conn_queue(Req *q, int status, struct MHD_Response *resp) {
    add_headers(q, resp);
    if (q->close_after) MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result rc = MHD_queue_response(q->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    q->status = status;
    q->responded = 1;
    return rc;
}

enum MHD_Result conn_respond(Req *q, int status, char *body, const char *content_type, const char *hname,
                             const char *hvalue) {
    enter(q->srv, q->conn, WATCH_BUSY);
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (content_type) MHD_add_response_header(resp, "Content-Type", content_type);
    if (hname) MHD_add_response_header(resp, hname, hvalue);
    return conn_queue(q, status, resp);
}

/* The error body in the shape of the API the request addressed. */
static char *error_body(const Req *q, const ApiError *err) {
    return q->anthropic_api ? anthropic_error(err) : wire_error(err);
}

enum MHD_Result conn_respond_error(Req *q, const ApiError *err) {
    return conn_respond(q, err->status, error_body(q, err), "application/json", NULL, NULL);
}

int conn_cancelled(void *req) {
    Req *q = req;
    if (q->srv->stopping) return 1;
    if (q->gone) return 1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) q->gone = 1;
    return q->gone;
}

void conn_reset_timeout(Req *q) {
    MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)q->srv->cfg.timeout_s);
}

static enum MHD_Result respond_simple(Req *q, int status, const char *type, const char *code, const char *hname,
                                      const char *hvalue, const char *fmt, const char *arg) {
    ApiError err;
    api_error(&err, status, type, code, NULL, fmt, arg);
    return conn_respond(q, status, error_body(q, &err), "application/json", hname, hvalue);
}

/* A refusal decided from the headers, answered once the body (discarded) is in, so that the
 * connection stays usable. */
static enum MHD_Result refuse_later(Req *q, int status, const char *type, const char *code, const char *hname,
                                    const char *hvalue, const char *fmt, const char *arg) {
    api_error(&q->refusal_err, status, type, code, NULL, fmt, arg);
    q->refusal = status;
    q->refusal_hname = hname, q->refusal_hvalue = hvalue;
    return MHD_YES;
}

/* A constant-time comparison of a presented key with ours. */
static int key_matches(const char *got, const char *want) {
    size_t n = strlen(got), m = strlen(want);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)got[i] ^ (unsigned char)want[i % m];
    return diff == 0;
}

/* OpenAI clients send "Authorization: Bearer KEY", Anthropic's send "x-api-key: KEY". */
static int authorized(const Server *srv, struct MHD_Connection *c) {
    if (!srv->cfg.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7) && key_matches(h + 7, srv->cfg.api_key)) return 1;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return h && key_matches(h, srv->cfg.api_key);
}

typedef struct {
    int n;
    const char *first;
    int differ;
} LengthHeaders;

static enum MHD_Result count_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    LengthHeaders *h = cls;
    if (strcasecmp(key, "Content-Length") != 0) return MHD_YES;
    if (h->n++ == 0) h->first = value;
    else if (strcmp(h->first, value ? value : "") != 0) h->differ = 1;
    return MHD_YES;
}

/* Two Content-Length headers that disagree, or one beside Transfer-Encoding: the body's end is
 * ambiguous (a proxy in front may have read it differently), so the request is refused. */
static int ambiguous_length(struct MHD_Connection *c) {
    LengthHeaders h = {0, NULL, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_length, &h);
    return h.differ || (h.n && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"));
}

static int declared_too_large(const Server *srv, struct MHD_Connection *c) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (!cl) return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    return errno || *end || n > srv->cfg.max_body;
}

static enum MHD_Result too_large(Req *q) {
    char limit[32];
    snprintf(limit, sizeof limit, "%zu", q->srv->cfg.max_body);
    return respond_simple(q, 413, "invalid_request_error", "request_too_large", NULL, NULL,
                          "The request body is larger than this server accepts (%s bytes).", limit);
}

/* A connection the watchdog refused, or a generation while the server stops: answered with
 * Retry-After once the body is in, then closed. */
static enum MHD_Result refuse_busy(Req *q, WatchVerdict v) {
    Server *srv = q->srv;
    snprintf(q->retry_after, sizeof q->retry_after, "%d", gate_retry_after(&srv->gate));
    q->close_after = 1;
    if (v == WATCH_REFUSED_CLIENT) {
        q->why = "per-client-limit";
        snprintf(q->detail, sizeof q->detail, "%d", srv->cfg.max_per_client);
        return refuse_later(q, 429, "rate_limit_error", "too_many_connections", "Retry-After", q->retry_after,
                            "This client has too many connections open (at most %s at a time); retry after the others finish.",
                            q->detail);
    }
    if (v == WATCH_REFUSED_FULL) {
        q->why = "connections-full";
        snprintf(q->detail, sizeof q->detail, "%d", srv->cfg.max_connections);
        return refuse_later(q, 503, "server_error", "server_full", "Retry-After", q->retry_after,
                            "Every connection of this server is busy (at most %s); retry later.", q->detail);
    }
    q->why = "stopping";
    return refuse_later(q, 503, "server_error", "server_stopping", "Retry-After", q->retry_after, "%s",
                        "The server is shutting down and takes no new generations.");
}

/* The first call of a request: everything the headers decide. Ambiguous or oversized bodies are
 * refused at once (the connection then closes); the other refusals wait for the body. */
static enum MHD_Result on_headers(Req *q, const char *method) {
    const char *allow = NULL;
    RouteResult r = route_find(method, q->path, &q->route, &allow);
    q->route_known = r != ROUTE_NOT_FOUND;
    q->anthropic_api = (q->route_known && route_is_anthropic(q->route)) ||
                       MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "anthropic-version") != NULL;
    if (ambiguous_length(q->conn))
        return respond_simple(q, 400, "invalid_request_error", "invalid_content_length", NULL, NULL, "%s",
                              "Conflicting Content-Length / Transfer-Encoding headers: the body's length is ambiguous.");
    if (declared_too_large(q->srv, q->conn)) return too_large(q);
    WatchVerdict v = watch_verdict(&q->srv->dog, watch_of(q->conn));
    if (v != WATCH_ADMITTED) return refuse_busy(q, v);
    if (r == ROUTE_NOT_FOUND)
        return refuse_later(q, 404, "invalid_request_error", "not_found", NULL, NULL, "Unknown path '%s'.", q->path);
    if (r == ROUTE_BAD_METHOD)
        return refuse_later(q, 405, "invalid_request_error", "method_not_allowed", "Allow", allow,
                            "Method not allowed here; use %s.", allow);
    if (r == ROUTE_PREFLIGHT) {
        q->preflight = 1;
        return MHD_YES;
    }
    if (!route_is_public(q->route) && !authorized(q->srv, q->conn))
        return refuse_later(q, 401, "invalid_request_error", "invalid_api_key", "WWW-Authenticate", "Bearer", "%s",
                            "Missing or invalid API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.");
    if (q->srv->draining && route_generates(q->route)) return refuse_busy(q, WATCH_ADMITTED);
    return MHD_YES;
}

/* Access-Control-Request-Headers echoed back when it is a plain list of header names. */
static const char *requested_headers(struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    if (!h || !*h || strlen(h) > 1024) return "Authorization, Content-Type, x-api-key, anthropic-version";
    for (const char *p = h; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("-_, ", *p))) return "Authorization, Content-Type, x-api-key, anthropic-version";
    return h;
}

static enum MHD_Result answer_preflight(Req *q) {
    const char *allow = NULL;
    Route r;
    route_find("OPTIONS", q->path, &r, &allow);
    char methods[64];
    snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Allow", methods);
    if (q->srv->cfg.cors_origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", requested_headers(q->conn));
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    return conn_queue(q, 204, resp);
}

/* The request is in: answer it. */
static enum MHD_Result dispatch(Req *q) {
    if (q->too_large) return too_large(q);
    if (q->refusal)
        return conn_respond(q, q->refusal, error_body(q, &q->refusal_err), "application/json", q->refusal_hname,
                            q->refusal_hvalue);
    if (q->preflight) return answer_preflight(q);
    switch (q->route) {
    case ROUTE_MODELS:
    case ROUTE_MODEL: return endpoint_models(q, q->route == ROUTE_MODEL);
    case ROUTE_HEALTH: return endpoint_health(q);
    case ROUTE_METRICS: return endpoint_metrics(q);
    case ROUTE_COUNT_TOKENS: return endpoint_count_tokens(q);
    case ROUTE_CHAT:
    case ROUTE_COMPLETIONS:
    case ROUTE_RESPONSES:
    case ROUTE_MESSAGES: break;
    }
    return endpoint_generate(q);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    Server *srv = cls;
    Req *q = *con_cls;
    if (!q) {
        q = df_calloc(1, sizeof *q);
        q->srv = srv;
        q->conn = c;
        q->t0 = df_now();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        *con_cls = q;
        enter(srv, c, WATCH_BODY);
        return on_headers(q, method);
    }
    if (q->responded) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_large && q->body.n + *upload_size > q->srv->cfg.max_body) {
            q->too_large = 1;
            sb_free(&q->body);
        }
        if (!q->too_large && !q->refusal && !q->preflight) sb_add(&q->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    enter(srv, c, WATCH_BUSY); /* the request is in: answering it may take long */
    return dispatch(q);
}

/* The request line of a request has arrived: a kept-alive connection's next request starts its
 * header deadline now. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    Server *srv = cls;
    watch_request_line(&srv->dog, watch_of(c));
    return NULL;
}

/* MHD's unescape callback: route_unescape (see route.h). */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    return route_unescape(s);
}

static void log_request(Req *q, enum MHD_RequestTerminationCode toe) {
    Server *srv = q->srv;
    double dt = df_now() - q->t0;
    int aborted = q->have_x && !q->x.finished && q->status == 200 && !q->cut_by_shutdown;
    if (aborted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) q->gone = 1;
    const char *finish = q->x.finished ? q->x.finish : q->cut_by_shutdown ? "shutdown" : q->gone ? "aborted" : "none";
    char gen[320] = "";
    if (q->have_x && (q->x.started || q->status == 200))
        snprintf(gen, sizeof gen, " id=%s prompt=%zu cached=%zu completion=%d finish=%s%s%s seq=%llu slot=%d wait=%.3fs model=%.3fs",
                 q->x.id, q->x.prompt.n, q->x.reused, q->x.completion, finish, q->x.detail ? "/" : "",
                 q->x.detail ? q->x.detail : "", (unsigned long long)q->seq, q->x.slot, q->wait_s + q->x.wait_s, q->x.model_s);
    int status = q->gone && !q->status ? 499 : q->status;
    fprintf(srv->log, "serve: %s %s %d%s time=%.3fs%s%s%s%s%s\n", q->method, q->path, status, gen, dt, q->stream ? " stream" : "",
            q->have_x && q->x.from_memo ? " memo" : "", q->gone ? " client-disconnected" : "", q->why ? " refused=" : "",
            q->why ? q->why : "");
    fflush(srv->log);
    pthread_mutex_lock(&srv->stats_mu);
    srv->stats.requests++;
    srv->stats.by_status[status_slot(status)]++;
    if (q->gone && q->have_x && !q->x.finished) srv->stats.disconnects++;
    if (q->cut_by_shutdown) srv->stats.shutdown_cut++;
    if (q->why && !strcmp(q->why, "stopping")) srv->stats.refused_draining++;
    pthread_mutex_unlock(&srv->stats_mu);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Server *srv = cls;
    enter(srv, c, WATCH_IDLE); /* kept alive for the next request, which must arrive in time too */
    Req *q = *con_cls;
    if (!q) return;
    endpoint_release(q);
    log_request(q, toe);
    if (q->have_x) exchange_free(&q->x);
    json_decref(q->echo);
    sb_free(&q->rst.text);
    if (q->counted_active) __atomic_sub_fetch(&srv->active, 1, __ATOMIC_RELAXED);
    sb_free(&q->body);
    sb_free(&q->sse);
    free(q);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    Server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = ci ? watch_add(&srv->dog, ci->connect_fd, ai ? ai->client_addr : NULL) : NULL;
    } else {
        watch_remove(&srv->dog, *socket_context);
        *socket_context = NULL;
    }
}

static int parse_host(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
    memset(ss, 0, sizeof *ss);
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof *a4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof *a6;
        return 0;
    }
    return df_fail("--host: '%s' is not an IPv4 or IPv6 address", host);
}

int serve_listen(const ServeConfig *cfg, int *fd) {
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (parse_host(cfg->host, cfg->port, &ss, &len)) return -1;
    int s = plat_socket_nonblock(ss.ss_family);
    if (s < 0) return df_fail("serve: socket: %s", strerror(errno));
    int one = 1;
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(s, (struct sockaddr *)&ss, len) ||
        listen(s, LISTEN_BACKLOG)) {
        int err = errno;
        close(s);
        return df_fail("serve: cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(err));
    }
    *fd = s;
    return 0;
}

/* Waits up to timeout_s (< 0: for ever) for a stop request: one byte on stop_fd. Returns 1 when
 * one came (and consumes it). */
static int stop_requested(int stop_fd, double timeout_s) {
    struct pollfd p = {stop_fd, POLLIN, 0};
    int n;
    while ((n = poll(&p, 1, timeout_s < 0 ? -1 : (int)(timeout_s * 1000))) < 0 && errno == EINTR) {}
    if (n <= 0) return 0;
    char c;
    while (read(stop_fd, &c, 1) < 0 && errno == EINTR) {}
    return 1; /* readable: a byte, or the writer closed it, either way a request to stop */
}

static void print_summary(Server *srv) {
    WatchCounts w = watchdog_counts(&srv->dog);
    ServerStats *s = &srv->stats;
    fprintf(srv->log,
            "serve: stopped after %llu requests: %llu generations (%llu tokens), %llu replayed from the memo, "
            "%llu stopped by a client disconnect, %llu cut by the shutdown, %llu turned away busy (429), "
            "%llu refused while stopping (503), %lu cut for arriving too slowly, %lu closed to make room for new clients, "
            "%lu refused over the per-client limit (429), %lu refused with every connection busy (503)\n",
            (unsigned long long)s->requests, (unsigned long long)s->generations, (unsigned long long)s->tokens,
            (unsigned long long)s->memo_hits, (unsigned long long)s->disconnects, (unsigned long long)s->shutdown_cut,
            (unsigned long long)s->busy, (unsigned long long)s->refused_draining, w.expired, w.evicted, w.refused_client,
            w.refused_full);
}

/* Everything serve_run sets up, undone in reverse; each part may be missing (a start that
 * failed half-way), so this is the one place the server unwinds. */
static void server_close(Server *srv) {
    if (srv->daemon) MHD_stop_daemon(srv->daemon);
    if (srv->dog_started) watchdog_stop(&srv->dog);
    if (srv->memo) memo_free(srv->memo);
    if (srv->gate_started) gate_destroy(&srv->gate);
    sched_stop(srv->sched);
    pcache_close(srv->cache);
    if (srv->trie) vocab_trie_free(srv->trie);
    pthread_mutex_destroy(&srv->stats_mu);
    free(srv);
}

/* The prompt cache's lines go to the server's log. */
static void cache_log(void *ctx, const char *line) {
    Server *srv = ctx;
    fprintf(srv->log, "serve: %s\n", line);
    fflush(srv->log);
}

/* The server up to its daemon (the model thread, the watchdog, the memo...), or NULL with a
 * message. */
static Server *server_open(Engine *e, const Tokenizer *tok, const ServeConfig *cfg, FILE *log) {
    Server *srv = df_calloc(1, sizeof *srv);
    srv->cfg = *cfg;
    srv->e = e;
    srv->log = log;
    pthread_mutex_init(&srv->stats_mu, NULL);
    WatchLimits lim = {cfg->header_timeout_s, cfg->body_timeout_s, cfg->timeout_s, cfg->max_connections, cfg->max_per_client};
    if (cfg->prompt_cache) {
        PromptCacheOptions po = {cfg->prompt_cache, cfg->prompt_cache_bytes, SERVE_CACHE_MIN_TOKENS, cache_log, srv};
        if (!(srv->cache = pcache_open(e, &po))) {
            if (!cfg->prompt_cache_optional) goto fail;
            fprintf(srv->log, "serve: no prompt cache: %s (DELTAFIN_PROMPT_CACHE names another folder)\n", df_errmsg());
        }
    }
    SchedOptions so = {cfg->parallel, cfg->prompt_snapshot, SERVE_PREFILL_ROWS, srv->cache};
    if (!(srv->trie = vocab_trie_new(tok)) || watchdog_start(&srv->dog, &lim)) goto fail;
    srv->dog_started = 1;
    if (!(srv->sched = sched_start(e, &so))) goto fail;
    gate_init(&srv->gate, cfg->parallel, cfg->queue);
    srv->gate_started = 1;
    srv->memo = memo_new(cfg->memo_entries);
    EngineInfo info;
    engine_info(e, &info);
    srv->env = (ExchangeEnv){tok, srv->memo, info.eos_id, cfg->max_tokens, cfg->answer_tokens, cfg->repeat_stop,
                             info.max_context, cfg->effort, srv->trie, cfg->model_id};
    return srv;
fail:
    server_close(srv);
    return NULL;
}

static unsigned port_of(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len)) return 0;
    return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* MHD on the listening socket (taken over). Returns 0, or -1 with a message. */
static int start_daemon(Server *srv, int listen_fd) {
    const ServeConfig *cfg = &srv->cfg;
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC;
    /* past --max-connections the watchdog answers newcomers 503 (or makes room); MHD itself
     * closes only what comes past twice the limit */
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_URI_LOG_CALLBACK, on_request_line, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * cfg->max_connections), MHD_OPTION_END);
    if (srv->daemon) return 0;
    close(listen_fd);
    return df_fail("serve: the HTTP daemon did not start on %s:%d", cfg->host, cfg->port);
}

static void announce(Server *srv, unsigned port) {
    const ServeConfig *cfg = &srv->cfg;
    char cap[32] = "unlimited", answer[32] = "none", cache[96] = "";
    if (srv->cache) {
        PromptCacheCounts pc;
        pcache_counts(srv->cache, &pc);
        const int in_mb = pc.bytes < 100000000; /* 0.0 GB says nothing of a cache that just began */
        snprintf(cache, sizeof cache, " (%d entries, %.1f %s of %.1f GB)", pc.entries, pc.bytes / (in_mb ? 1e6 : 1e9),
                 in_mb ? "MB" : "GB", cfg->prompt_cache_bytes / 1e9);
    }
    if (cfg->max_tokens >= 0) snprintf(cap, sizeof cap, "%lld", (long long)cfg->max_tokens);
    if (cfg->answer_tokens >= 0) snprintf(answer, sizeof answer, "%lld", (long long)cfg->answer_tokens);
    int v6 = strchr(cfg->host, ':') != NULL;
    EngineInfo info;
    engine_info(srv->e, &info);
    fprintf(srv->log,
            "serve: listening on http://%s%s%s:%u (model %s; %d generations at a time (%s), queue %d; memo %d entries; "
            "prompt snapshot %s; prompt cache %s%s; answer limit %s, max tokens %s, repetition stop %s; API key %s; CORS %s; "
            "connections %d, %d per client)\n",
            v6 ? "[" : "", cfg->host, v6 ? "]" : "", port, cfg->model_id, cfg->parallel,
            info.slots_how[0] ? info.slots_how : "as asked", cfg->queue, cfg->memo_entries,
            cfg->prompt_snapshot ? "on" : "off", srv->cache ? cfg->prompt_cache : "off", cache, answer, cap, cfg->repeat_stop ? "on" : "off",
            cfg->api_key ? "required" : "not required", cfg->cors_origin ? cfg->cors_origin : "off", cfg->max_connections,
            cfg->max_per_client);
    fflush(srv->log);
}

/* The shutdown: no new connections; the generations running or queued may finish for up to
 * drain_s (a second stop request ends the wait); then the rest end with their final events,
 * which get a moment to go out before the daemon closes every connection. */
static void drain(Server *srv, int stop_fd) {
    srv->draining = 1;
    MHD_socket ls = MHD_quiesce_daemon(srv->daemon);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    int active = __atomic_load_n(&srv->active, __ATOMIC_RELAXED);
    if (active)
        fprintf(srv->log, "serve: stopping: %d requests being answered may take up to %d s to finish (stop again to end them now)\n",
                active, srv->cfg.drain_s);
    fflush(srv->log);
    double deadline = df_now() + srv->cfg.drain_s;
    while (__atomic_load_n(&srv->active, __ATOMIC_RELAXED) && df_now() < deadline && !stop_requested(stop_fd, 0.05)) {}
    srv->stopping = 1;
    deadline = df_now() + FINAL_EVENTS_S;
    while (__atomic_load_n(&srv->active, __ATOMIC_RELAXED) && df_now() < deadline) usleep(10000);
}

int serve_run(Engine *e, const Tokenizer *tok, const ServeConfig *cfg, int listen_fd, int stop_fd, FILE *log) {
    Server *srv = server_open(e, tok, cfg, log);
    if (!srv) {
        close(listen_fd);
        return -1;
    }
    int rc = start_daemon(srv, listen_fd);
    if (!rc) {
        announce(srv, port_of(listen_fd));
        stop_requested(stop_fd, -1);
        drain(srv, stop_fd);
        MHD_stop_daemon(srv->daemon);
        srv->daemon = NULL;
        print_summary(srv);
    }
    server_close(srv);
    return rc;
}

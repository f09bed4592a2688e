/* http.c - the HTTP side of the server on libmicrohttpd: listening, routing, authentication,
 * body limits, per-request log lines and the shutdown summary. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/conn.h"
#include "util/err.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void arm(Server *srv, struct MHD_Connection *c, int on) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci) watch_arm(&srv->dog, ci->socket_context, on);
}

enum MHD_Result conn_respond(Req *q, int status, char *body, const char *content_type, const char *hname,
                             const char *hvalue) {
    arm(q->srv, q->conn, 0);
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    if (hname) MHD_add_response_header(resp, hname, hvalue);
    enum MHD_Result rc = MHD_queue_response(q->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    q->status = status;
    q->responded = 1;
    return rc;
}

enum MHD_Result conn_respond_error(Req *q, const ApiError *err) {
    return conn_respond(q, err->status, wire_error(err), "application/json", NULL, NULL);
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
    return conn_respond(q, status, wire_error(&err), "application/json", hname, hvalue);
}

/* 0 and *route for a known path and method; 404 or 405 otherwise (*allow: the right method). */
static int route_of(const char *path, const char *method, Route *route, const char **allow) {
    static const struct {
        const char *path, *method;
        Route route;
    } table[] = {{"/v1/models", "GET", ROUTE_MODELS},
                 {"/v1/models/" SERVE_MODEL_ID, "GET", ROUTE_MODEL},
                 {"/v1/chat/completions", "POST", ROUTE_CHAT},
                 {"/v1/completions", "POST", ROUTE_COMPLETIONS}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(path, table[i].path) != 0) continue;
        *allow = table[i].method;
        *route = table[i].route;
        return strcmp(method, table[i].method) ? 405 : 0;
    }
    return 404;
}

static int authorized(const Server *srv, struct MHD_Connection *c) {
    if (!srv->cfg.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    const char *got = h + 7, *want = srv->cfg.api_key;
    size_t n = strlen(got), m = strlen(want);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)got[i] ^ (unsigned char)want[i % (m ? m : 1)];
    return diff == 0;
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

/* The first call of a request: everything the headers decide. */
static enum MHD_Result on_headers(Req *q, const char *method) {
    const char *allow = NULL;
    int r = route_of(q->path, method, &q->route, &allow);
    if (r == 404) return respond_simple(q, 404, "invalid_request_error", "not_found", NULL, NULL, "Unknown path '%s'.", q->path);
    if (r == 405)
        return respond_simple(q, 405, "invalid_request_error", "method_not_allowed", "Allow", allow,
                              "Method not allowed here; use %s.", allow);
    if (!authorized(q->srv, q->conn))
        return respond_simple(q, 401, "invalid_request_error", "invalid_api_key", "WWW-Authenticate", "Bearer",
                              "%s", "Missing or invalid API key: send 'Authorization: Bearer <key>'.");
    if (declared_too_large(q->srv, q->conn)) return too_large(q);
    if (q->route == ROUTE_MODELS || q->route == ROUTE_MODEL) return endpoint_models(q, q->route == ROUTE_MODEL);
    return MHD_YES;
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
        q->t0 = now_s();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        *con_cls = q;
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
        if (!q->too_large) sb_add(&q->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    arm(srv, c, 0); /* the request is in: answering it may take long */
    if (q->too_large) return too_large(q);
    return endpoint_generate(q);
}

static void log_request(Req *q, enum MHD_RequestTerminationCode toe) {
    Server *srv = q->srv;
    double dt = now_s() - q->t0;
    int aborted = q->have_x && !q->x.finished && q->status == 200;
    if (aborted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) q->gone = 1;
    char gen[256] = "";
    if (q->have_x && (q->x.started || q->status == 200))
        snprintf(gen, sizeof gen, " id=%s prompt=%zu cached=%zu completion=%d finish=%s seq=%llu wait=%.3fs model=%.3fs",
                 q->x.id, q->x.prompt.n, q->x.reused, q->x.completion,
                 q->x.finished ? q->x.finish : q->gone ? "aborted" : "none", (unsigned long long)q->seq, q->wait_s,
                 q->x.model_s);
    fprintf(srv->log, "serve: %s %s %d%s time=%.3fs%s%s%s\n", q->method, q->path, q->gone && !q->status ? 499 : q->status,
            gen, dt, q->stream ? " stream" : "", q->have_x && q->x.from_memo ? " memo" : "",
            q->gone ? " client-disconnected" : "");
    fflush(srv->log);
    pthread_mutex_lock(&srv->stats_mu);
    srv->requests++;
    if (q->gone && q->have_x && !q->x.finished) srv->disconnects++;
    pthread_mutex_unlock(&srv->stats_mu);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Server *srv = cls;
    arm(srv, c, 1); /* the next request on this connection must arrive in time too */
    Req *q = *con_cls;
    if (!q) return;
    endpoint_release(q);
    log_request(q, toe);
    if (q->have_x) exchange_free(&q->x);
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
        *socket_context = ci ? watch_add(&srv->dog, ci->connect_fd) : NULL;
    } else {
        watch_remove(&srv->dog, *socket_context);
        *socket_context = NULL;
    }
}

static int parse_host(const char *host, int port, struct sockaddr_storage *ss, unsigned *flags) {
    memset(ss, 0, sizeof *ss);
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *flags |= MHD_USE_IPv6;
        return 0;
    }
    return df_fail("--host: '%s' is not an IPv4 or IPv6 address", host);
}

/* SIGINT/SIGTERM may land on any thread (the compute pool's included): the handler only writes
 * to a pipe that the main thread waits on. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    char c = (char)sig;
    ssize_t n = write(stop_pipe[1], &c, 1);
    (void)n;
}

static void wait_for_stop(void) {
    char c;
    while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) {}
}

static void print_summary(Server *srv) {
    fprintf(srv->log,
            "serve: stopped after %llu requests: %llu generations (%llu tokens), %llu replayed from the memo, "
            "%llu stopped by a client disconnect, %llu turned away busy, %lu cut for arriving too slowly\n",
            (unsigned long long)srv->requests, (unsigned long long)srv->generations, (unsigned long long)srv->tokens,
            (unsigned long long)srv->memo_hits, (unsigned long long)srv->disconnects, (unsigned long long)srv->busy, srv->dog.expired);
}

int serve_check(const ServeConfig *cfg) {
    struct sockaddr_storage ss;
    unsigned flags = 0;
    return parse_host(cfg->host, cfg->port, &ss, &flags);
}

int serve_run(Engine *e, const Tokenizer *tok, const ServeConfig *cfg, FILE *log) {
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    struct sockaddr_storage ss;
    if (parse_host(cfg->host, cfg->port, &ss, &flags)) return -1;
    if (pipe(stop_pipe)) return df_fail("serve: pipe: %s", strerror(errno));
    Server *srv = df_calloc(1, sizeof *srv);
    srv->cfg = *cfg;
    srv->e = e;
    srv->log = log;
    if (watchdog_start(&srv->dog, cfg->timeout_s)) {
        close(stop_pipe[0]), close(stop_pipe[1]);
        free(srv);
        return -1;
    }
    session_init(&srv->session, e);
    if (cfg->prompt_snapshot) session_keep_snapshots(&srv->session);
    gate_init(&srv->gate, cfg->queue);
    srv->memo = memo_new(cfg->memo_entries);
    srv->env = (ExchangeEnv){tok, srv->memo, cfg->max_tokens, e->max_context, cfg->effort};
    pthread_mutex_init(&srv->stats_mu, NULL);
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections, MHD_OPTION_END);
    int rc = 0;
    if (!d) rc = df_fail("serve: cannot listen on %s:%d (%s)", cfg->host, cfg->port, errno ? strerror(errno) : "address in use?");
    else {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        char cap[32] = "unlimited";
        if (cfg->max_tokens >= 0) snprintf(cap, sizeof cap, "%lld", (long long)cfg->max_tokens);
        int v6 = strchr(cfg->host, ':') != NULL;
        fprintf(log, "serve: listening on http://%s%s%s:%u (model %s; one generation at a time, queue %d; memo %d entries; "
                     "prompt snapshot %s; max tokens %s; API key %s)\n",
                v6 ? "[" : "", cfg->host, v6 ? "]" : "", di ? di->port : (unsigned)cfg->port, SERVE_MODEL_ID, cfg->queue,
                cfg->memo_entries, cfg->prompt_snapshot ? "on" : "off", cap, cfg->api_key ? "required" : "not required");
        fflush(log);
        wait_for_stop();
        srv->stopping = 1;
        MHD_stop_daemon(d);
    }
    watchdog_stop(&srv->dog);
    if (d) print_summary(srv);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    memo_free(srv->memo);
    gate_destroy(&srv->gate);
    session_free(&srv->session);
    pthread_mutex_destroy(&srv->stats_mu);
    free(srv);
    return rc;
}

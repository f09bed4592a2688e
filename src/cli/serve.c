/* deltafin serve - the OpenAI- and Anthropic-compatible HTTP server (src/serve/server.h). The
 * command binds the address before the model loads (a busy port fails at once), and owns the
 * signals: SIGINT and SIGTERM write to the pipe serve_run takes as its stop request. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "engine/engine.h"
#include "fetch/manifest.h"
#include "serve/gate.h"
#include "serve/server.h"
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/platform.h"

/* "*" or an origin as browsers send it: scheme://host[:port], nothing after. */
static int cors_origin_ok(const char *o) {
    if (!o || !strcmp(o, "*")) return 1;
    const char *host = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
    int ok = host && *host && strlen(o) <= 255;
    for (const char *p = host; ok && *p; p++) ok = isalnum((unsigned char)*p) || strchr("-.:[]", *p);
    return ok;
}

/* A model name clients can send back: 1..SERVE_MODEL_ID_MAX visible ASCII characters. */
static int model_name_ok(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~') return 0;
    return n >= 1 && n <= SERVE_MODEL_ID_MAX;
}

/* The model's own name: the repository an install came from ("moonshotai/Kimi-K3", from its
 * manifest), else the checkpoint directory's name ("k3-mini"). */
static void model_name(const char *dir, char *out, size_t n) {
    Manifest m;
    memset(&m, 0, sizeof m);
    const char *repo = NULL;
    if (!manifest_load(&m, dir) && m.source[0]) {
        const char *host = strstr(m.source, "://");
        repo = host ? strchr(host + 3, '/') : NULL;
        if (repo) repo++;
    }
    if (repo && *repo) snprintf(out, n, "%s", repo);
    manifest_free(&m);
    if (repo && *repo && model_name_ok(out)) return;
    char path[PATH_MAX];
    if (!realpath(dir, path)) snprintf(path, sizeof path, "%s", dir);
    snprintf(out, n, "%s", basename(path));
    if (!model_name_ok(out)) snprintf(out, n, "deltafin");
}

/* SIGINT and SIGTERM may land on any thread (the compute pool's included): the handler only
 * writes to the pipe serve_run waits on. A second signal is a second byte: stop waiting for the
 * running generations. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    char c = (char)sig;
    int saved = errno;
    ssize_t n = write(stop_pipe[1], &c, 1);
    (void)n;
    errno = saved;
}

static void catch_stop_signals(void) {
    if (plat_pipe_nonblock(stop_pipe)) df_die("serve: pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up mid-answer is noticed by the write */
}

/* Connection limits not given: room for every slot and queue place from one client (a gateway,
 * a connection pool) plus a few idle kept-alive connections, and twice that for the server. */
static void connection_defaults(ServeConfig *cfg, int64_t max_conn, int64_t per_client) {
    int need = cfg->parallel + cfg->queue + 8;
    cfg->max_connections = max_conn > 0 ? (int)max_conn : 2 * need > 64 ? 2 * need : 64;
    cfg->max_per_client = per_client > 0 ? (int)per_client : need < cfg->max_connections ? need : cfg->max_connections;
}

int cmd_serve(Settings *set, int argc, char **argv) {
    const char *host = "127.0.0.1", *cors = NULL, *alias = NULL;
    int64_t port = 8000, queue = 16, timeout = 30, header_timeout = 10, body_timeout = 60, drain = 10, max_body = 8 << 20;
    int64_t max_conn = -1, per_client = -1, parallel = 0;
    const CliOpt opts[] = {
        CLI_STR("host", 0, &host, "ADDR", "address to listen on (default 127.0.0.1: this machine only)"),
        CLI_INT("port", 0, &port, "N", "port (default 8000; 0 picks a free one)", 0, 65535),
        {"alias", 'a', OPT_STR, &alias, "NAME", "the model's name in the API (default: the model's own, e.g. k3-mini, "
         "moonshotai/Kimi-K3)", 0, 0, "served-model-name"},
        CLI_INT("parallel", 0, &parallel, "N",
                "generations decoded together, each in its own slot (default: as many as a quarter of the memory "
                "budget holds, at most 8)",
                1, GATE_MAX_SEATS),
        CLI_INT("queue", 0, &queue, "N", "requests that may wait for a slot (default 16; more get 429)", 0, 1024),
        CLI_INT("timeout", 0, &timeout, "S", "seconds a kept-alive connection may wait for its next request (default 30)",
                1, 86400),
        CLI_INT("header-timeout", 0, &header_timeout, "S",
                "seconds a request's line and headers may take to arrive (default 10)", 1, 3600),
        CLI_INT("body-timeout", 0, &body_timeout, "S", "seconds a request's body may take after its headers (default 60)",
                1, 86400),
        CLI_INT("drain-timeout", 0, &drain, "S",
                "on SIGINT/SIGTERM, seconds the running generations may take to finish before they are ended "
                "(default 10; a second signal ends them at once)",
                0, 86400),
        CLI_INT("max-body", 0, &max_body, "BYTES", "largest request body (default 8388608)", 1024, 1ll << 32),
        CLI_INT("max-connections", 0, &max_conn, "N",
                "simultaneous connections; more are answered 503 (default 64, or twice the per-client default when "
                "that is more)",
                1, 4096),
        CLI_INT("max-connections-per-client", 0, &per_client, "N",
                "simultaneous connections from one address; more are answered 429 (default --parallel + --queue + 8)",
                1, 4096),
        CLI_STR("cors-origin", 0, &cors, "ORIGIN", "allow browsers from this origin (or *) to call the API (default: no CORS)"),
    };
    static const char about[] =
        "Serves the model over HTTP with OpenAI's API (/v1/models, /v1/chat/completions, /v1/completions, "
        "/v1/responses, streamed or not) and Anthropic's (/v1/messages, /v1/messages/count_tokens), with /health and "
        "/metrics. Several generations are decoded together (--parallel), the next ones wait in --queue; a full queue "
        "gets 429 with Retry-After. --api-key KEY (or DELTAFIN_API_KEY) requires 'Authorization: Bearer KEY' or "
        "'x-api-key: KEY'. SIGINT or SIGTERM stops it: the running generations get --drain-timeout seconds to finish.";
    const CliCommand cmd = {"serve", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!cors_origin_ok(cors))
        cli_usage_error(&cmd, "--cors-origin '%s' is not * or an origin like https://app.example.com:8080", cors);
    if (alias && !model_name_ok(alias))
        cli_usage_error(&cmd, "--alias '%s' is not 1 to %d visible ASCII characters", alias, SERVE_MODEL_ID_MAX);
    if (per_client > 0 && max_conn > 0 && per_client > max_conn)
        cli_usage_error(&cmd, "--max-connections-per-client must be 1..--max-connections");
    ServeConfig cfg = {.host = host,
                       .port = (int)port,
                       .api_key = set->api_key,
                       .queue = (int)queue,
                       .max_tokens = set->server_max_tokens,
                       .answer_tokens = set->answer_tokens > 0 ? set->answer_tokens : -1,
                       .repeat_stop = set->repeat_stop,
                       .memo_entries = set->memo_entries,
                       .timeout_s = (int)timeout,
                       .header_timeout_s = (int)header_timeout,
                       .body_timeout_s = (int)body_timeout,
                       .drain_s = (int)drain,
                       .max_body = (size_t)max_body,
                       .cors_origin = cors,
                       .prompt_snapshot = set->prompt_snapshot,
                       .effort = set->effort};
    char cache_dir[4096];
    if (settings_prompt_cache_dir(set, cache_dir, sizeof cache_dir)) df_die("%s", df_errmsg());
    cfg.prompt_cache = cache_dir[0] ? cache_dir : NULL;
    cfg.prompt_cache_bytes = set->prompt_cache_bytes;
    cfg.prompt_cache_optional = !set->prompt_cache;
    int listen_fd;
    if (serve_listen(&cfg, &listen_fd)) df_die("%s", df_errmsg());
    catch_stop_signals();
    EngineOptions eo = set->engine;
    eo.extra_states = cfg.prompt_snapshot; /* each slot's snapshot is a second State */
    eo.slots = parallel ? (int)parallel : ENGINE_SLOTS_AUTO;
    eo.decoding = "greedy (a request may sample)";
    Engine *e = cli_open_engine(set, &eo, stderr);
    EngineInfo info;
    engine_info(e, &info);
    cfg.parallel = info.slots;
    connection_defaults(&cfg, max_conn, per_client);
    if (cfg.max_per_client > cfg.max_connections) cli_usage_error(&cmd, "--max-connections-per-client must be 1..--max-connections");
    char name[SERVE_MODEL_ID_MAX + 1];
    if (alias) snprintf(name, sizeof name, "%s", alias);
    else model_name(info.dir, name, sizeof name);
    cfg.model_id = name;
    Tokenizer *tok = tok_load(info.dir);
    if (!tok) df_die("%s", df_errmsg());
    if (tok_vocab_size(tok) != info.vocab)
        df_die("serve: the tokenizer has %d ids but the model's vocabulary is %d", tok_vocab_size(tok), info.vocab);
    int rc = serve_run(e, tok, &cfg, listen_fd, stop_pipe[0], stderr);
    if (rc) fprintf(stderr, "deltafin: %s\n", df_errmsg());
    tok_free(tok);
    if (engine_close(e)) fprintf(stderr, "deltafin: %s\n", df_errmsg()), rc = -1;
    return rc ? 1 : 0;
}

/* deltafin serve - the OpenAI- and Anthropic-compatible HTTP server (src/serve/server.h). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "engine/engine.h"
#include "serve/gate.h"
#include "serve/server.h"
#include "text/tokenizer.h"
#include "util/err.h"

/* --api-key: validated by the DELTAFIN_API_KEY row. An empty key would turn authentication off
 * without saying so, so it is refused. */
static const char *flag_key(Settings *s, const char *key) {
    if (!key) return s->api_key;
    if (!*key) df_die("serve: --api-key is empty; give a key, or leave it out to serve without authentication");
    if (settings_set(s, settings_find("DELTAFIN_API_KEY"), key, "--api-key")) df_die("%s", df_errmsg());
    return s->api_key;
}

/* "*" or an origin as browsers send it: scheme://host[:port], nothing after. */
static void check_cors_origin(const char *o) {
    if (!o || !strcmp(o, "*")) return;
    const char *host = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
    int ok = host && *host && strlen(o) <= 255;
    for (const char *p = host; ok && *p; p++) ok = isalnum((unsigned char)*p) || strchr("-.:[]", *p);
    if (!ok) df_die("serve: --cors-origin '%s' is not * or an origin like https://app.example.com:8080", o);
}

int cmd_serve(const Settings *set, int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *key = NULL, *cors = NULL;
    int64_t port = 8000, queue = 16, timeout = 30, header_timeout = 10, body_timeout = 60, max_body = 8 << 20;
    int64_t max_conn = 64, per_client = -1, parallel = 0;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"host", ARG_STR, &host, "address to listen on (default 127.0.0.1: this machine only)"},
        {"port", ARG_INT, &port, "port (default 8000; 0 picks a free one)"},
        {"api-key", ARG_STR, &key, "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (default $DELTAFIN_API_KEY)"},
        {"parallel", ARG_INT, &parallel,
         "generations decoded together, each in its own slot (default: as many as a quarter of the memory budget holds, at most 8)"},
        {"queue", ARG_INT, &queue, "requests that may wait for a slot (default 16; more get 429)"},
        {"timeout", ARG_INT, &timeout, "seconds a kept-alive connection may wait for its next request (default 30)"},
        {"header-timeout", ARG_INT, &header_timeout, "seconds a request's line and headers may take to arrive (default 10)"},
        {"body-timeout", ARG_INT, &body_timeout, "seconds a request's body may take after its headers (default 60)"},
        {"max-body", ARG_INT, &max_body, "largest request body in bytes (default 8388608)"},
        {"max-connections", ARG_INT, &max_conn, "simultaneous connections (default 64)"},
        {"max-connections-per-client", ARG_INT, &per_client,
         "simultaneous connections from one address (default a quarter of --max-connections)"},
        {"cors-origin", ARG_STR, &cors, "allow browsers from this origin (or *) to call the API (default: no CORS)"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), pos, 0, &n_pos,
                   "deltafin serve [--model DIR] [--host 127.0.0.1] [--port 8000]"))
        df_die("%s", df_errmsg());
    Settings s = *set;
    const char *api_key = flag_key(&s, key);
    check_cors_origin(cors);
    if (port < 0 || port > 65535) df_die("serve: --port must be 0..65535");
    if (parallel < 0 || parallel > GATE_MAX_SEATS) df_die("serve: --parallel must be 1..%d", GATE_MAX_SEATS);
    if (queue < 0 || queue > 1024) df_die("serve: --queue must be 0..1024");
    if (timeout < 1 || timeout > 86400) df_die("serve: --timeout must be 1..86400 seconds");
    if (header_timeout < 1 || header_timeout > 3600) df_die("serve: --header-timeout must be 1..3600 seconds");
    if (body_timeout < 1 || body_timeout > 86400) df_die("serve: --body-timeout must be 1..86400 seconds");
    if (max_body < 1024 || max_body > (1ll << 32)) df_die("serve: --max-body must be 1024..4294967296 bytes");
    if (max_conn < 1 || max_conn > 4096) df_die("serve: --max-connections must be 1..4096");
    if (per_client < 0) per_client = max_conn / 4 > 0 ? max_conn / 4 : 1;
    if (per_client < 1 || per_client > max_conn) df_die("serve: --max-connections-per-client must be 1..--max-connections");
    ServeConfig cfg = {.host = host,
                       .port = (int)port,
                       .api_key = api_key,
                       .parallel = (int)parallel,
                       .queue = (int)queue,
                       .max_tokens = set->server_max_tokens,
                       .memo_entries = set->memo_entries,
                       .timeout_s = (int)timeout,
                       .header_timeout_s = (int)header_timeout,
                       .body_timeout_s = (int)body_timeout,
                       .max_body = (size_t)max_body,
                       .max_connections = (int)max_conn,
                       .max_per_client = (int)per_client,
                       .cors_origin = cors,
                       .prompt_snapshot = set->prompt_snapshot,
                       .effort = set->effort};
    if (serve_check(&cfg)) df_die("%s", df_errmsg());
    EngineOptions eo = set->engine;
    eo.extra_states = cfg.prompt_snapshot; /* each slot's snapshot is a second State */
    eo.slots = parallel ? (int)parallel : ENGINE_SLOTS_AUTO;
    Engine e;
    if (engine_open(&e, settings_dir(set, model), &eo)) df_die("%s", df_errmsg());
    cfg.parallel = e.slots;
    engine_print_settings(&e, stderr);
    Tokenizer *tok = tok_load(e.cat.dir);
    if (!tok) df_die("%s", df_errmsg());
    if (tok_vocab_size(tok) != e.cat.cfg.vocab)
        df_die("serve: the tokenizer has %d ids but the model's vocabulary is %d", tok_vocab_size(tok), e.cat.cfg.vocab);
    int rc = serve_run(&e, tok, &cfg, stderr);
    if (rc) fprintf(stderr, "deltafin: %s\n", df_errmsg());
    tok_free(tok);
    engine_close(&e);
    return rc ? 1 : 0;
}

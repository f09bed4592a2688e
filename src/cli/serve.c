/* deltafin serve - the OpenAI- and Anthropic-compatible HTTP server (src/serve/server.h). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "engine/engine.h"
#include "serve/gate.h"
#include "serve/server.h"
#include "text/tokenizer.h"
#include "util/err.h"

/* "*" or an origin as browsers send it: scheme://host[:port], nothing after. */
static int cors_origin_ok(const char *o) {
    if (!o || !strcmp(o, "*")) return 1;
    const char *host = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
    int ok = host && *host && strlen(o) <= 255;
    for (const char *p = host; ok && *p; p++) ok = isalnum((unsigned char)*p) || strchr("-.:[]", *p);
    return ok;
}

int cmd_serve(Settings *set, int argc, char **argv) {
    const char *host = "127.0.0.1", *cors = NULL;
    int64_t port = 8000, queue = 16, timeout = 30, header_timeout = 10, body_timeout = 60, max_body = 8 << 20;
    int64_t max_conn = 64, per_client = -1, parallel = 0;
    const CliOpt opts[] = {
        CLI_STR("host", 0, &host, "ADDR", "address to listen on (default 127.0.0.1: this machine only)"),
        CLI_INT("port", 0, &port, "N", "port (default 8000; 0 picks a free one)", 0, 65535),
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
        CLI_INT("max-body", 0, &max_body, "BYTES", "largest request body (default 8388608)", 1024, 1ll << 32),
        CLI_INT("max-connections", 0, &max_conn, "N", "simultaneous connections (default 64)", 1, 4096),
        CLI_INT("max-connections-per-client", 0, &per_client, "N",
                "simultaneous connections from one address (default a quarter of --max-connections)", 1, 4096),
        CLI_STR("cors-origin", 0, &cors, "ORIGIN", "allow browsers from this origin (or *) to call the API (default: no CORS)"),
    };
    static const char about[] =
        "Serves the model over HTTP with OpenAI's API (/v1/models, /v1/chat/completions, /v1/completions, streamed "
        "or not) and Anthropic's (/v1/messages), with /health and /metrics. Several generations are decoded "
        "together (--parallel), the next ones wait in --queue; a full queue gets 429 with Retry-After. --api-key KEY "
        "(or DELTAFIN_API_KEY) requires 'Authorization: Bearer KEY' or 'x-api-key: KEY'.";
    const CliCommand cmd = {"serve", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!cors_origin_ok(cors))
        cli_usage_error(&cmd, "--cors-origin '%s' is not * or an origin like https://app.example.com:8080", cors);
    if (per_client < 0) per_client = max_conn / 4 > 0 ? max_conn / 4 : 1;
    if (per_client > max_conn) cli_usage_error(&cmd, "--max-connections-per-client must be 1..--max-connections");
    const char *api_key = set->api_key;
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
    eo.decoding = "greedy (a request may sample)";
    Engine e;
    cli_open_engine(&e, set, &eo, stderr);
    cfg.parallel = e.slots;
    Tokenizer *tok = tok_load(e.cat.dir);
    if (!tok) df_die("%s", df_errmsg());
    if (tok_vocab_size(tok) != e.cat.cfg.vocab)
        df_die("serve: the tokenizer has %d ids but the model's vocabulary is %d", tok_vocab_size(tok), e.cat.cfg.vocab);
    int rc = serve_run(&e, tok, &cfg, stderr);
    if (rc) fprintf(stderr, "deltafin: %s\n", df_errmsg());
    tok_free(tok);
    if (engine_close(&e)) fprintf(stderr, "deltafin: %s\n", df_errmsg()), rc = -1;
    return rc ? 1 : 0;
}

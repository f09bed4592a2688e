/* deltafin serve - the OpenAI-compatible HTTP server (src/serve/server.h). */
#include <stdio.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "engine/engine.h"
#include "serve/server.h"
#include "text/tokenizer.h"
#include "util/err.h"

int cmd_serve(const Settings *set, int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *api_key = set->api_key;
    int64_t port = 8000, queue = 0, timeout = 30, max_body = 8 << 20, max_conn = 64;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"host", ARG_STR, &host, "address to listen on (default 127.0.0.1: this machine only)"},
        {"port", ARG_INT, &port, "port (default 8000; 0 picks a free one)"},
        {"api-key", ARG_STR, &api_key, "require 'Authorization: Bearer KEY' (default $DELTAFIN_API_KEY)"},
        {"queue", ARG_INT, &queue, "requests that may wait while one generates (default 0: answer 429)"},
        {"timeout", ARG_INT, &timeout, "seconds an idle connection is kept and a request may take to arrive (default 30)"},
        {"max-body", ARG_INT, &max_body, "largest request body in bytes (default 8388608)"},
        {"max-connections", ARG_INT, &max_conn, "simultaneous connections (default 64)"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 8, pos, 0, &n_pos, "deltafin serve [--model DIR] [--host 127.0.0.1] [--port 8000]"))
        df_die("%s", df_errmsg());
    if (port < 0 || port > 65535) df_die("serve: --port must be 0..65535");
    if (queue < 0 || queue > 1024) df_die("serve: --queue must be 0..1024");
    if (timeout < 1 || timeout > 86400) df_die("serve: --timeout must be 1..86400 seconds");
    if (max_body < 1024 || max_body > (1ll << 32)) df_die("serve: --max-body must be 1024..4294967296 bytes");
    if (max_conn < 1 || max_conn > 4096) df_die("serve: --max-connections must be 1..4096");
    if (api_key && !*api_key) api_key = NULL;
    ServeConfig cfg = {.host = host,
                       .port = (int)port,
                       .api_key = api_key,
                       .queue = (int)queue,
                       .max_tokens = set->server_max_tokens,
                       .memo_entries = set->memo_entries,
                       .timeout_s = (int)timeout,
                       .max_body = (size_t)max_body,
                       .max_connections = (int)max_conn,
                       .prompt_snapshot = set->prompt_snapshot,
                       .effort = set->effort};
    if (serve_check(&cfg)) df_die("%s", df_errmsg());
    EngineOptions eo = set->engine;
    eo.extra_states = cfg.prompt_snapshot; /* the snapshot is a second State */
    Engine e;
    if (engine_open(&e, settings_dir(set, model), &eo)) df_die("%s", df_errmsg());
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

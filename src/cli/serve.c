/* deltafin serve - the OpenAI-compatible HTTP server (src/serve/server.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "engine/engine.h"
#include "serve/memo.h"
#include "serve/server.h"
#include "engine/session.h"
#include "text/tokenizer.h"
#include "util/err.h"

static int max_tokens_from_env(int64_t *out) {
    const char *v = getenv("K3_SERVER_MAX_TOKENS");
    *out = -1;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || n < 1 || n > (1 << 24))
        return df_fail("K3_SERVER_MAX_TOKENS: '%s' is not a token count in 1..16777216", v);
    *out = n;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *api_key = getenv("DELTAFIN_API_KEY");
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
    ServeConfig cfg = {host, (int)port, api_key, (int)queue, -1, 0, (int)timeout, (size_t)max_body, (int)max_conn, 1};
    if (max_tokens_from_env(&cfg.max_tokens) || memo_entries_from_env(&cfg.memo_entries) ||
        session_snapshot_from_env(&cfg.prompt_snapshot) || serve_check(&cfg))
        df_die("%s", df_errmsg());
    Engine e;
    if (engine_open_states(&e, model, cfg.prompt_snapshot)) df_die("%s", df_errmsg()); /* the snapshot is a second State */
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

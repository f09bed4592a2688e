/* deltafin run - generate greedily from a prompt, printing as tokens are produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/generate.h"
#include "util/err.h"

static int print_id(void *ctx, int tok) {
    int *first = ctx;
    printf(*first ? "%d" : " %d", tok);
    *first = 0;
    fflush(stdout);
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL;
    int64_t max_new = 32, chunk = MODEL_MAX_CHUNK;
    int stats = 0;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"tokens", ARG_STR, &tokens, "prompt as token ids, space-separated"},
        {"max-new", ARG_INT, &max_new, "tokens to generate (default 32)"},
        {"chunk", ARG_INT, &chunk, "prefill positions per pass (1..64, default 64)"},
        {"stats", ARG_FLAG, &stats, "print speed and a per-phase breakdown"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 5, pos, 0, &n_pos, "deltafin run --model DIR --tokens \"1 2 3\" [--max-new N]"))
        df_die("%s", df_errmsg());
    if (!tokens) df_die("run: give the prompt with --tokens");
    if (max_new < 0 || max_new > (1 << 24)) df_die("run: --max-new must be 0..16777216");
    Engine e;
    if (engine_open(&e, model)) df_die("%s", df_errmsg());
    engine_print_settings(&e, stderr);
    int max = (int)strlen(tokens) / 2 + 1;
    int *ids = df_malloc(sizeof *ids * (size_t)max);
    int n = parse_token_list(tokens, ids, max, e.cat.cfg.vocab);
    if (n < 0) df_die("%s", df_errmsg());
    if (n > e.max_context) df_die("run: the prompt's %d tokens exceed the context limit %d (K3_CONTEXT)", n, e.max_context);
    generate_install_sigint();
    State *st = state_create(e.model);
    GenOptions opt = {(int)max_new, -1, (int)chunk};
    GenResult res;
    int first = 1;
    int rc = generate(&e, st, ids, n, &opt, print_id, &first, &res);
    printf("\n");
    if (res.interrupted) fprintf(stderr, "deltafin: interrupted after %d tokens\n", res.generated);
    if (rc) df_die("%s", df_errmsg());
    if (stats) generate_print_stats(&e, &res, stderr);
    state_destroy(st);
    free(ids);
    engine_close(&e);
    return res.interrupted ? 130 : 0;
}

/* deltafin warm - rank missing experts by how often recorded router traces selected them and
 * fetch the most used N, so a streaming install serves its common paths from local disk. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/installer.h"
#include "fetch/trace.h"
#include "util/err.h"
#include "util/fileio.h"

typedef struct {
    uint64_t count;
    int layer, expert;
} Ranked;

static int by_count(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return x->layer != y->layer ? x->layer - y->layer : x->expert - y->expert;
}

int cmd_warm(Settings *set, int argc, char **argv) {
    const char *trace = NULL;
    int64_t n_fetch = 64;
    int dry = 0;
    const CliOpt opts[] = {
        CLI_STR("trace", 0, &trace, "FILE", "the router trace to rank by (default DIR/router_trace.jsonl)"),
        CLI_INT("fetch", 0, &n_fetch, "N", "fetch the N most used missing experts (default 64)", 0, INT32_MAX),
        CLI_FLAG("dry-run", 0, &dry, "print the ranking and fetch nothing"),
    };
    static const char about[] =
        "Ranks the experts a streaming install lacks by how often recorded router traces (--router-trace FILE, "
        "K3_TRACE) selected them, and fetches the most used, so the common paths read from local disk.";
    const CliCommand cmd = {"warm", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    if (set->engine.offline && !dry)
        df_die("warm: K3_OFFLINE=1: warm downloads experts and needs the network (unset K3_OFFLINE, or use --dry-run "
               "for the ranking)");
    Installer *in;
    if (install_open_managed(&in, root, dry, &set->engine.fetch)) df_die("warm: %s", df_errmsg());
    const K3Config *cfg = &installer_catalog(in)->cfg;
    size_t n_all = (size_t)cfg->n_layers * cfg->n_experts;
    uint64_t *counts = df_calloc(n_all, sizeof *counts), tokens;
    char *default_trace = path_join(installer_root(in), "router_trace.jsonl");
    if (router_trace_count(trace ? trace : default_trace, cfg, counts, &tokens)) df_die("warm: %s", df_errmsg());
    Ranked *r = df_malloc(sizeof *r * n_all);
    int n = 0;
    for (int l = cfg->first_dense; l < cfg->n_layers; l++)
        for (int x = 0; x < cfg->n_experts; x++)
            if (counts[(size_t)l * cfg->n_experts + x] && !installer_has_expert(in, l, x))
                r[n++] = (Ranked){counts[(size_t)l * cfg->n_experts + x], l, x};
    qsort(r, (size_t)n, sizeof *r, by_count);
    int take = n < n_fetch ? n : (int)n_fetch;
    printf("trace: %llu tokens; %d missing experts were used; fetching the top %d\n", (unsigned long long)tokens, n, take);
    int *layer = df_malloc(sizeof *layer * (size_t)(take + 1)), *expert = df_malloc(sizeof *expert * (size_t)(take + 1));
    for (int i = 0; i < take; i++) {
        layer[i] = r[i].layer, expert[i] = r[i].expert;
        if (i < 10) printf("  layer %d expert %d: used %llu times\n", r[i].layer, r[i].expert, (unsigned long long)r[i].count);
    }
    FetchPlan plan = {0};
    plan_experts(in, layer, expert, take, &plan);
    int rc = dry ? 0 : installer_run(in, &plan, "warm", 1);
    if (!rc) install_report(in, stdout);
    plan_free(&plan);
    free(layer), free(expert), free(r), free(counts), free(default_trace);
    installer_close(in);
    if (rc) df_die("%s", df_errmsg());
    return 0;
}

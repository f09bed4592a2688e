/* deltafin setup - install K3 from Hugging Face or a mirror: metadata, shard headers, the spine
 * and, in full mode, every expert. Resumable; --dry-run prints the plan and writes nothing. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/installer.h"
#include "fetch/progress.h"
#include "util/err.h"

int cmd_setup(Settings *set, int argc, char **argv) {
    int full = 0, stream = 0, dry = 0;
    const CliOpt opts[] = {
        CLI_FLAG("full", 0, &full, "install every expert (the default when the disk allows)"),
        CLI_FLAG("stream", 0, &stream, "install metadata, headers and the spine; experts on demand"),
        CLI_FLAG("dry-run", 0, &dry, "print the plan (bytes, files, disk) and write nothing"),
    };
    static const char about[] =
        "Installs K3 from Hugging Face or a mirror (--hf-host, K3_HF_HOST) into -m/--model DIR, else "
        "DELTAFIN_ROOT, else $XDG_CACHE_HOME/deltafin (~/.cache/deltafin), where every command looks for it: "
        "metadata, tokenizer, shard headers, the spine and, in full mode, every expert. Resumable after any "
        "interruption; sizes and published SHA-256 verified.";
    const CliCommand cmd = {"setup", "[--full | --stream] [options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    if (full && stream) df_die("setup: give at most one of --full and --stream");
    Installer *in;
    if (installer_open(&in, root, INST_REFRESH, dry, &set->engine.fetch)) df_die("setup: %s", df_errmsg());
    FetchPlan spine = {0}, all = {0};
    plan_headers_and_spine(in, &spine);
    plan_everything(in, &all);
    uint64_t free_b, full_b, present_b;
    if (installer_disk_free(in, &free_b)) df_die("%s", df_errmsg());
    installer_totals(in, &full_b, &present_b);
    char a[32], b[32], c[32], d[32];
    if (!full && !stream) {
        full = install_fits(all.bytes + installer_fetched_bytes(in), free_b);
        if (!full)
            printf("a full install needs %s more (%s in all) and %s kept free, but %s is free: installing in "
                   "streaming mode\n",
                   fmt_bytes(a, sizeof a, all.bytes), fmt_bytes(b, sizeof b, full_b),
                   fmt_bytes(d, sizeof d, install_reserve(all.bytes)), fmt_bytes(c, sizeof c, free_b));
    }
    FetchPlan *plan = full ? &all : &spine;
    uint64_t meta = installer_fetched_bytes(in); /* metadata and headers, already in memory */
    const Catalog *cat = installer_catalog(in);
    char e[32];
    printf("plan: %s install of %s from %s\n  %d shards (%s; %s present), %s to fetch in %d requests "
           "(after %s of metadata and headers), %s free\n",
           full ? "full" : "streaming", installer_root(in), install_source_display(&set->engine.fetch), cat->n_shards,
           fmt_bytes(a, sizeof a, full_b), fmt_bytes(b, sizeof b, present_b), fmt_bytes(c, sizeof c, plan->bytes), plan->n,
           fmt_bytes(e, sizeof e, meta), fmt_bytes(d, sizeof d, free_b));
    int rc = 0;
    if (!install_fits(plan->bytes + meta, free_b))
        rc = df_fail("setup: %s to fetch and %s to keep free, but only %s free on %s",
                     fmt_bytes(a, sizeof a, plan->bytes + meta), fmt_bytes(c, sizeof c, install_reserve(plan->bytes + meta)),
                     fmt_bytes(b, sizeof b, free_b), installer_root(in));
    if (!rc && !dry) rc = installer_write_fetched(in);
    if (!rc && !dry) rc = installer_run(in, plan, full ? "setup (full)" : "setup (spine)");
    if (!rc && !dry) rc = install_verify_report(in);
    if (!rc && !dry) install_report(in, stdout);
    plan_free(&spine), plan_free(&all);
    installer_close(in);
    if (rc) df_die("%s", df_errmsg());
    return 0;
}

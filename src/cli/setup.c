/* deltafin setup - install K3 from Hugging Face or a mirror: the revision pinned to a commit,
 * metadata, shard headers, the spine and, in full mode, every expert. Resumable; --dry-run prints
 * the plan (from the source, or from the local install when the source cannot be reached) and
 * writes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/installer.h"
#include "fetch/progress.h"
#include "util/err.h"
#include "util/fileio.h"

/* A dry run whose source cannot be consulted plans from the local install, if there is one. */
static Installer *open_for_plan(const Settings *set, const char *root, int dry) {
    int offline = set->engine.offline;
    Installer *in;
    InstallOptions o = {root, offline ? INST_OFFLINE : INST_REFRESH, dry, &set->engine.fetch};
    if (!installer_open(&in, &o)) {
        if (offline) printf("the source was not consulted (K3_OFFLINE=1): the plan is what the local install lacks\n");
        return in;
    }
    char why[1024];
    snprintf(why, sizeof why, "%s", df_errmsg());
    installer_close(in);
    if (offline) df_die("setup --dry-run: K3_OFFLINE=1 and %s holds no install to plan from (%s)", root, why);
    char *man = path_join(root, MANIFEST_FILE);
    int local = access(man, F_OK) == 0;
    free(man);
    if (!dry || !local) df_die("setup%s: %s", dry ? " --dry-run: cannot reach the source" : "", why);
    o.access = INST_OFFLINE;
    if (installer_open(&in, &o)) df_die("setup --dry-run: %s", df_errmsg());
    printf("the source was not consulted (%s): the plan is what the local install lacks\n", why);
    return in;
}

int cmd_setup(Settings *set, int argc, char **argv) {
    int full = 0, stream = 0, dry = 0, force = 0;
    const CliOpt opts[] = {
        CLI_FLAG("full", 0, &full, "install every expert (the default when the disk allows)"),
        CLI_FLAG("stream", 0, &stream, "install metadata, headers and the spine; experts on demand"),
        CLI_FLAG("dry-run", 0, &dry, "print the plan (bytes, files, disk) and write nothing"),
        CLI_FLAG("force", 0, &force,
                 "install into a directory that holds other files (files of the same names are replaced)"),
    };
    static const char about[] =
        "Installs K3 from Hugging Face or a mirror (--hf-host, K3_HF_HOST) into -m/--model DIR, else "
        "DELTAFIN_ROOT, else $XDG_CACHE_HOME/deltafin (~/.cache/deltafin), where every command looks for it: "
        "metadata, tokenizer, shard headers, the spine and, in full mode, every expert, all pinned to the commit the "
        "source reports. Resumable after any interruption; SHA-256 computed while downloading and checked against "
        "the published hashes; an interrupted run keeps what it received. Run again on an install, it keeps to the "
        "install's source and revision unless the settings name others (another source: files it cannot tie to the "
        "installed bytes are fetched again). A directory holding other files is refused unless --force; with "
        "--dry-run or K3_OFFLINE=1 the plan comes from the local install when the source cannot be consulted.";
    const CliCommand cmd = {"setup", "[--full | --stream] [options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    if (full && stream) cli_usage_error(&cmd, "give at most one of --full and --stream");
    if (install_check_root(root, force)) df_die("setup: %s", df_errmsg());
    if (!dry && installer_check_writable(root, "setup", INSTALL_WRITER_TODO)) df_die("setup: %s", df_errmsg());
    if (set->engine.offline && !dry)
        df_die("setup: K3_OFFLINE=1: setup fetches the model from the source and needs the network (unset K3_OFFLINE, "
               "or use --dry-run to see what is missing)");
    Installer *in = open_for_plan(set, root, dry);
    int from_source = *installer_pin_note(in) != 0;
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
           full ? "full" : "streaming", installer_root(in), installer_source(in), cat->n_shards,
           fmt_bytes(a, sizeof a, full_b), fmt_bytes(b, sizeof b, present_b), fmt_bytes(c, sizeof c, plan->bytes), plan->n,
           fmt_bytes(e, sizeof e, meta), fmt_bytes(d, sizeof d, free_b));
    if (from_source) printf("  %s\n", installer_pin_note(in));
    if (dry) printf("  disk needed: %s (%s to fetch and %s kept free)\n",
                    fmt_bytes(a, sizeof a, plan->bytes + meta + install_reserve(plan->bytes + meta)),
                    fmt_bytes(b, sizeof b, plan->bytes + meta), fmt_bytes(c, sizeof c, install_reserve(plan->bytes + meta)));
    int rc = 0;
    if (!install_fits(plan->bytes + meta, free_b))
        rc = df_fail("setup: %s to fetch and %s to keep free, but only %s free on %s",
                     fmt_bytes(a, sizeof a, plan->bytes + meta), fmt_bytes(c, sizeof c, install_reserve(plan->bytes + meta)),
                     fmt_bytes(b, sizeof b, free_b), installer_root(in));
    if (!rc && !dry) rc = installer_write_fetched(in);
    if (!rc && !dry) rc = installer_run(in, plan, full ? "setup (full)" : "setup (spine)", 1);
    if (!rc && !dry) rc = install_verify_report(in, 0, 1);
    if (!rc && !dry) install_revision_report(in, stdout);
    if (!rc && !dry) install_report(in, stdout);
    plan_free(&spine), plan_free(&all);
    installer_close(in);
    if (rc) df_die("%s", df_errmsg());
    return 0;
}

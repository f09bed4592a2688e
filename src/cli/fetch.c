/* deltafin fetch - complete a streaming install (everything missing, or the experts of some
 * layers). Resumable and runnable any time; what is present is never fetched again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/installer.h"
#include "fetch/progress.h"
#include "util/err.h"

int cmd_fetch(Settings *set, int argc, char **argv) {
    int dry = 0, verify = 0;
    const char *layers = NULL;
    const CliOpt opts[] = {
        CLI_STR("layers", 0, &layers, "LIST", "only the experts of these layers, e.g. 1-40,45"),
        CLI_FLAG("verify", 0, &verify, "hash every complete file again first; damaged ones are fetched anew"),
        CLI_FLAG("dry-run", 0, &dry, "print what would be fetched and write nothing"),
    };
    static const char about[] =
        "Completes a streaming install: every missing expert, or those of some layers, from the source it was "
        "installed from and at the commit it is pinned to (settings naming another source are refused). Resumable "
        "and runnable any time; what is present is never fetched again. --verify hashes every complete file first "
        "and fetches damaged ones again.";
    const CliCommand cmd = {"fetch", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    if (set->engine.offline && !dry)
        df_die("fetch: K3_OFFLINE=1: fetch downloads from the source and needs the network (unset K3_OFFLINE, or use "
               "--dry-run to see what is missing)");
    Installer *in;
    if (install_open_managed(&in, root, dry, &set->engine.fetch)) df_die("fetch: %s", df_errmsg());
    const K3Config *cfg = &installer_catalog(in)->cfg;
    FetchPlan plan = {0};
    int rc = 0;
    VerifyReport vr = {0};
    if (verify && !dry && installer_check_writable(root, "fetch --verify", INSTALL_WRITER_TODO))
        df_die("fetch: %s", df_errmsg());
    if (verify && !dry) { /* damaged files lose their bytes here, so the plan below includes them */
        if (installer_verify(in, UINT64_MAX, 1, &vr) && !vr.bad) df_die("fetch: %s", df_errmsg());
        if (vr.bad) fprintf(stderr, "deltafin: fetch --verify: %d damaged file(s) are fetched again\n", vr.bad);
    }
    if (layers) {
        uint8_t *want = calloc((size_t)cfg->n_layers, 1);
        rc = parse_layer_spec(layers, cfg, want);
        if (!rc) plan_layers(in, want, &plan);
        free(want);
    } else {
        plan_everything(in, &plan);
    }
    uint64_t free_b = 0;
    if (!rc) rc = installer_disk_free(in, &free_b);
    char a[32], b[32], c[32];
    if (!rc) printf("plan: %s to fetch in %d requests into %s, %s free\n", fmt_bytes(a, sizeof a, plan.bytes), plan.n,
                    installer_root(in), fmt_bytes(b, sizeof b, free_b));
    /* a complete install needs nothing: only a fetch that writes needs write access */
    if (!rc && !dry && plan.n) rc = installer_check_writable(installer_root(in), "fetch", INSTALL_WRITER_TODO);
    if (!rc && !install_fits(plan.bytes, free_b))
        rc = df_fail("fetch: %s to fetch and %s to keep free, but only %s free", fmt_bytes(a, sizeof a, plan.bytes),
                     fmt_bytes(c, sizeof c, install_reserve(plan.bytes)), fmt_bytes(b, sizeof b, free_b));
    if (!rc && !dry) rc = installer_run(in, &plan, "fetch", 1);
    if (!rc && !dry) rc = install_verify_report(in, 0, 1);
    if (!rc && vr.bad_whole)
        rc = df_fail("fetch: %d damaged metadata file(s) were dropped: deltafin setup --root %s fetches them again",
                     vr.bad_whole, installer_root(in));
    if (!rc) install_report(in, stdout);
    plan_free(&plan);
    installer_close(in);
    if (rc) df_die("%s", df_errmsg());
    return 0;
}

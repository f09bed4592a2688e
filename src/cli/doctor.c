/* deltafin doctor - a read-only health check of an install, without network: which files are
 * present, what is missing, and anything inconsistent (sizes, headers, manifest). Exit status 0
 * when the install is usable (full, or streaming with the spine complete), 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/installer.h"
#include "fetch/progress.h"
#include "util/err.h"
#include "util/fileio.h"

/* Every manifest entry against the file on disk. Returns the number of problems. */
static int check_files(Installer *in) {
    Manifest *m = installer_manifest(in);
    int bad = 0;
    for (int i = 0; i < m->n; i++) {
        ManifestFile *f = &m->f[i];
        char *path = path_join(installer_root(in), f->name);
        struct stat st;
        uint64_t have = manifest_present_bytes(m, i);
        if (stat(path, &st) != 0) {
            if (have) printf("INCONSISTENT %s: recorded with %llu bytes present but the file is missing\n", f->name,
                             (unsigned long long)have), bad++;
        } else if ((uint64_t)st.st_size != f->size) {
            printf("INCONSISTENT %s: %lld bytes on disk, the manifest expects %llu\n", f->name, (long long)st.st_size,
                   (unsigned long long)f->size), bad++;
        }
        free(path);
    }
    static const char *required[] = {"config.json", "tokenizer_config.json", "tiktoken.model"};
    for (int k = 0; k < 3; k++) {
        char *path = path_join(installer_root(in), required[k]);
        struct stat st;
        if (stat(path, &st) != 0) printf("MISSING %s\n", required[k]), bad++;
        free(path);
    }
    return bad;
}

int cmd_doctor(Settings *set, int argc, char **argv) {
    static const char about[] =
        "A read-only health check of an install, without network: which files are present, what is missing, and "
        "anything inconsistent (sizes, headers, manifest). Exit status 0 when the install is usable.";
    const CliCommand cmd = {"doctor", "[options]", about, NULL, 0, 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    Installer *in;
    if (installer_open(&in, root, INST_OFFLINE, 0, &set->engine.fetch)) {
        printf("NOT USABLE: %s\n", df_errmsg());
        installer_close(in);
        return 1;
    }
    if (installer_unmanaged(in)) {
        printf("%s: a checkpoint without %s (not installed by deltafin setup): every file is complete and "
               "its headers are valid\nok\n", installer_root(in), MANIFEST_FILE);
        installer_close(in);
        return 0;
    }
    int bad = check_files(in);
    const Catalog *cat = installer_catalog(in);
    Manifest *m = installer_manifest(in);
    FetchPlan spine = {0};
    plan_headers_and_spine(in, &spine);
    char a[32], b[32];
    for (int s = 0; s < cat->n_shards; s++) {
        ManifestFile *f = &m->f[installer_shard_entry(in, s)];
        uint64_t have = manifest_present_bytes(m, installer_shard_entry(in, s));
        printf("%s: %s of %s present%s%s\n", f->name, fmt_bytes(a, sizeof a, have), fmt_bytes(b, sizeof b, f->size),
               have == f->size ? (f->verified ? ", SHA-256 verified" : *f->sha256 ? ", SHA-256 not yet checked" : ", no published hash")
                               : "",
               "");
    }
    printf("metadata:");
    for (int i = 0; i < m->n; i++)
        if (m->f[i].whole) printf(" %s", m->f[i].name);
    printf("\n");
    if (spine.bytes) printf("MISSING spine: %s in %d ranges (run deltafin setup)\n", fmt_bytes(a, sizeof a, spine.bytes), spine.n), bad++;
    install_report(in, stdout);
    printf("%s\n", bad ? "NOT USABLE: see above" : "ok");
    plan_free(&spine);
    installer_close(in);
    return bad ? 1 : 0;
}

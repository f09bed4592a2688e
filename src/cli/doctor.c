/* deltafin doctor - a read-only health check of an install, without network: every file the model
 * needs parsed and checked (config, index, shard headers against the schema, the tokenizer),
 * sizes against the manifest, small files re-hashed against the hashes recorded for them (all
 * complete files with --verify), and plainly what each check could rely on: a published hash, or
 * sizes only. Exit status 0 when the install is usable (full, or streaming with the spine
 * complete), 1 otherwise. */
#include <stdint.h>
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
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/fileio.h"

#define DOCTOR_RECHECK_BYTES (64u << 20) /* files this small are hashed again on every run */

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
    return bad;
}

static const char *hash_state(const ManifestFile *f, uint64_t have) {
    if (have != f->size) return "";
    if (f->verified) return !strncmp(f->pub, "git-sha1:", 9) ? ", git blob SHA-1 verified" : ", SHA-256 verified";
    if (*f->pub) return ", published hash not yet checked";
    return *f->local ? ", no published hash: size checked, SHA-256 recorded here" : ", no published hash: size checked";
}

static int check_tokenizer(Installer *in) {
    Tokenizer *t = tok_load_checked(installer_root(in), installer_catalog(in)->cfg.vocab);
    if (!t) {
        printf("BAD tokenizer: %s\n", df_errmsg());
        return 1;
    }
    printf("tokenizer: %d ids, tiktoken.model and tokenizer_config.json parse\n", tok_vocab_size(t));
    tok_free(t);
    return 0;
}

int cmd_doctor(Settings *set, int argc, char **argv) {
    int verify = 0;
    const CliOpt opts[] = {
        CLI_FLAG("verify", 0, &verify, "hash every complete file again (long for a full install)"),
    };
    static const char about[] =
        "A read-only health check of an install, without network: every file the model needs parsed and checked "
        "(config, index, shard headers, the tokenizer), sizes against the manifest, small files hashed again (every "
        "complete file with --verify), and what each check rests on: a published hash, or sizes only. Exit status 0 "
        "when the install is usable.";
    const CliCommand cmd = {"doctor", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    const char *root = cli_install_dir(set);
    Installer *in;
    InstallOptions o = {root, INST_OFFLINE, 0, &set->engine.fetch};
    if (installer_open(&in, &o)) {
        printf("NOT USABLE: %s\n", df_errmsg());
        installer_close(in);
        return 1;
    }
    int bad = check_tokenizer(in);
    if (installer_unmanaged(in)) {
        printf("%s: a checkpoint without %s (not installed by deltafin setup): config, index and every shard header "
               "are valid; file contents have no recorded hash to check\n%s\n",
               installer_root(in), MANIFEST_FILE, bad ? "NOT USABLE: see above" : "ok");
        installer_close(in);
        return bad;
    }
    bad += check_files(in);
    const Catalog *cat = installer_catalog(in);
    Manifest *m = installer_manifest(in);
    FetchPlan spine = {0};
    plan_headers_and_spine(in, &spine);
    char a[32], b[32];
    for (int s = 0; s < cat->n_shards; s++) {
        ManifestFile *f = &m->f[installer_shard_entry(in, s)];
        uint64_t have = manifest_present_bytes(m, installer_shard_entry(in, s));
        printf("%s: %s of %s present%s\n", f->name, fmt_bytes(a, sizeof a, have), fmt_bytes(b, sizeof b, f->size),
               hash_state(f, have));
    }
    printf("metadata:");
    for (int i = 0; i < m->n; i++)
        if (m->f[i].whole) printf(" %s%s", m->f[i].name, m->f[i].verified ? " (verified)" : "");
    printf("\n");
    install_revision_report(in, stdout);
    bad += install_access_report(in, &set->engine.fetch, stdout);
    if (install_verify_report(in, verify ? UINT64_MAX : DOCTOR_RECHECK_BYTES, 0)) {
        printf("BAD: %s; deltafin fetch --verify --root %s fetches them again\n", df_errmsg(), installer_root(in));
        bad++;
    }
    if (spine.bytes) printf("MISSING spine: %s in %d ranges (run deltafin setup)\n", fmt_bytes(a, sizeof a, spine.bytes), spine.n), bad++;
    install_report(in, stdout);
    printf("%s\n", bad ? "NOT USABLE: see above" : "ok");
    plan_free(&spine);
    installer_close(in);
    return bad ? 1 : 0;
}

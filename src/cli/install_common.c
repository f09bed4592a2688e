#include "cli/install_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/progress.h"
#include "fetch/source.h"
#include "util/err.h"
#include "util/fileio.h"

int install_check_root(const char *root, int force) {
    int exists;
    char first[256];
    if (file_dir_peek(root, &exists, first, sizeof first)) return -1;
    if (!*first || force) return 0;
    char *man = path_join(root, MANIFEST_FILE);
    int ours = access(man, F_OK) == 0;
    free(man);
    if (ours) return 0;
    return df_fail("%s is not empty and holds no deltafin install (it holds %s): give a new or empty directory, or "
                   "--force to install into it (files of the same names are replaced)",
                   root, first);
}

uint64_t install_reserve(uint64_t need) { return need / 100 + (64u << 20); }

int install_fits(uint64_t need, uint64_t free_b) { return need == 0 || need + install_reserve(need) <= free_b; }

int install_access_report(Installer *in, const FetchOptions *fetch, FILE *f) {
    uint64_t have, all;
    installer_expert_counts(in, &have, &all);
    int complete = have == all, bad = 0, err = installer_write_errno(installer_root(in));
    char why[1200];
    int mismatch = installer_source_mismatch(in, fetch, why, sizeof why);
    const Manifest *m = installer_manifest(in);
    if (*m->source) fprintf(f, "source: %s\n", m->source);
    if (mismatch < 0) fprintf(f, "BAD source: %s\n", df_errmsg()), bad++;
    else if (mismatch && complete) fprintf(f, "note: %s (the install is complete: nothing is fetched)\n", why);
    else if (mismatch) fprintf(f, "MISMATCH %s\n", why), bad++;
    if (!err) fprintf(f, "access: writable here\n");
    else if (complete)
        fprintf(f, "access: read-only here (%s): fine for a complete install, which runs without writing\n", strerror(err));
    else
        fprintf(f, "READ-ONLY %s (%s): its %llu missing experts cannot be fetched from here: deltafin fetch --root %s, "
                   "run by a user who may write there, completes it\n",
                installer_root(in), strerror(err), (unsigned long long)(all - have), installer_root(in)), bad++;
    return bad;
}

int install_verify_report(Installer *in, uint64_t recheck_upto, int apply) {
    VerifyReport r;
    int rc = installer_verify(in, recheck_upto, apply, &r);
    printf("verified: every range's size and source");
    if (r.verified) printf("; %d file(s) match the hash the source published", r.verified);
    if (r.local_only)
        printf("; %d file(s) have no published hash: only their sizes were checked (their SHA-256 is recorded to "
               "detect later damage)", r.local_only);
    if (r.incomplete) printf("; %d file(s) are incomplete (streaming install): sizes only until complete", r.incomplete);
    if (r.bad) printf("; %d file(s) FAILED", r.bad);
    printf("\n");
    return rc;
}

void install_revision_report(Installer *in, FILE *f) {
    const Manifest *m = installer_manifest(in);
    int pinned, unidentified;
    installer_pinning(in, &pinned, &unidentified);
    if (pinned) fprintf(f, "revision: %s at commit %.12s (pinned: bytes of any other commit are refused)\n", m->revision, m->commit);
    else if (!unidentified)
        fprintf(f, "revision: %s, not pinned to a commit (the source names none): files are tied to it by "
                   "their published hashes or ETags, and sizes\n", *m->revision ? m->revision : "?");
    else
        fprintf(f, "revision: %s, not pinned: the source names no commit and %d shard(s) have no ETag or published hash: "
                   "bytes fetched for them later are checked by size only (a full install now avoids that)\n",
                *m->revision ? m->revision : "?", unidentified);
}

void install_report(Installer *in, FILE *f) {
    uint64_t full, present, ex_have, ex_all;
    installer_totals(in, &full, &present);
    installer_expert_counts(in, &ex_have, &ex_all);
    char a[32], b[32], c[32];
    const Catalog *cat = installer_catalog(in);
    fprintf(f, "install %s: %s of %s local; experts %llu of %llu local", installer_root(in), fmt_bytes(a, sizeof a, present),
            fmt_bytes(b, sizeof b, full), (unsigned long long)ex_have, (unsigned long long)ex_all);
    if (present == full) fprintf(f, " (full install)\n");
    else
        fprintf(f, " (streaming install)\n  finishing costs %s: deltafin fetch --root %s\n",
                fmt_bytes(c, sizeof c, (ex_all - ex_have) * cat->expert_bytes), installer_root(in));
}

int parse_layer_spec(const char *spec, const K3Config *cfg, uint8_t *want) {
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return df_fail("--layers: '%s': expected numbers like 1-40,45", spec);
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p) return df_fail("--layers: '%s': range without an end", spec);
        }
        if (a > b) return df_fail("--layers: %ld-%ld: empty range", a, b);
        if (a < cfg->first_dense || b >= cfg->n_layers)
            return df_fail("--layers: %ld-%ld: routed experts are in layers %d-%d", a, b, cfg->first_dense, cfg->n_layers - 1);
        for (long l = a; l <= b; l++) want[l] = 1;
        if (*end == ',') end++;
        else if (*end) return df_fail("--layers: '%s': unexpected '%c'", spec, *end);
        p = end;
    }
    return 0;
}

int install_open_managed(Installer **in, const char *root, int dry, const FetchOptions *fetch) {
    InstallOptions o = {root, dry ? INST_OFFLINE : INST_ONLINE, 0, fetch};
    if (installer_open(in, &o)) return -1;
    if (!installer_unmanaged(*in)) return 0;
    int rc = df_fail("%s has no %s: it was not installed by deltafin setup", installer_root(*in), MANIFEST_FILE);
    installer_close(*in);
    *in = NULL;
    return rc;
}

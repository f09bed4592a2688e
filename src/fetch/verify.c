/* verify.c - checking the bytes of an install's complete files against the hashes it knows: the
 * one the source published, and the SHA-256 recorded when the file was completed here. Every file
 * is checked and every bad one named in one run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/digest.h"
#include "fetch/installer_int.h"
#include "fetch/progress.h"
#include "util/err.h"
#include "util/fileio.h"

#define VERIFY_CHUNK (8u << 20)

/* SHA-256 (and the git blob SHA-1 when that is what was published) of a whole file. */
static int hash_file(const char *path, const char *label, uint64_t size, int want_git, char sha[65], char git[41],
                     Progress *pr, uint64_t *done) {
    int fd = file_open_regular(path);
    if (fd < 0) return -1;
    Sha256 s;
    GitSha1 g = {0};
    if (sha256_init(&s) || (want_git && git_sha1_init(&g, size))) {
        if (s.ctx) sha256_abort(&s);
        close(fd);
        return -1;
    }
    uint8_t *buf = df_malloc(VERIFY_CHUNK);
    int rc = 0;
    for (uint64_t at = 0; at < size && !rc;) {
        size_t n = size - at < VERIFY_CHUNK ? (size_t)(size - at) : VERIFY_CHUNK;
        rc = file_pread_full(fd, buf, n, at, label);
        if (rc) break;
        sha256_update(&s, buf, n);
        if (want_git) git_sha1_update(&g, buf, n);
        at += n, *done += n;
        if (pr) progress_show(pr, *done, 0);
    }
    free(buf);
    close(fd);
    if (rc) {
        sha256_abort(&s);
        if (want_git) git_sha1_final(&g, git); /* releases it; the digest is not used */
        return -1;
    }
    int frc = sha256_final(&s, sha);
    if (want_git && git_sha1_final(&g, git)) frc = -1;
    return frc;
}

/* Whether entry e needs hashing in this pass. */
static int wants_hash(const ManifestFile *f, uint64_t recheck_upto) {
    return f->size <= recheck_upto || !*f->local || (*f->pub && !f->verified);
}

static void add_name(char *list, size_t cap, int *n, const char *name) {
    size_t at = strlen(list);
    if (at < cap - 80) snprintf(list + at, cap - at, "%s%s", *n ? ", " : "", name);
    else if (at < cap - 8 && !strstr(list, "...")) snprintf(list + at, cap - at, ", ...");
    (*n)++;
}

int installer_verify(Installer *in, uint64_t recheck_upto, int apply, VerifyReport *rep) {
    memset(rep, 0, sizeof *rep);
    if (in->unmanaged) return 0;
    Manifest *m = &in->man;
    uint64_t total = 0, done = 0;
    for (int e = 0; e < m->n; e++)
        if (manifest_has(m, e, 0, m->f[e].size) && wants_hash(&m->f[e], recheck_upto)) total += m->f[e].size;
    Progress pr;
    progress_start(&pr, "verifying SHA-256", total);
    int show = total > (256u << 20);
    char bad[700] = "";
    for (int e = 0; e < m->n; e++) {
        ManifestFile *f = &m->f[e];
        if (!manifest_has(m, e, 0, f->size)) {
            rep->incomplete++;
            continue;
        }
        if (!wants_hash(f, recheck_upto)) {
            if (*f->pub) rep->verified++;
            else rep->local_only++;
            continue;
        }
        char *path = path_join(in->root, f->name), sha[65], git[41], why[300] = "";
        int git_pub = !strncmp(f->pub, "git-sha1:", 9);
        if (hash_file(path, f->name, f->size, git_pub, sha, git, show ? &pr : NULL, &done))
            snprintf(why, sizeof why, "%s", df_errmsg());
        else if (!strncmp(f->pub, "sha256:", 7) && strcmp(sha, f->pub + 7))
            snprintf(why, sizeof why, "SHA-256 %.16s... does not match the published %.16s...", sha, f->pub + 7);
        else if (git_pub && strcmp(git, f->pub + 9))
            snprintf(why, sizeof why, "git blob SHA-1 %.16s... does not match the published %.16s...", git, f->pub + 9);
        else if (*f->local && strcmp(sha, f->local))
            snprintf(why, sizeof why, "SHA-256 %.16s... differs from the %.16s... recorded when it was fetched (damaged "
                                      "since)", sha, f->local);
        free(path);
        if (*why) {
            fprintf(stderr, "deltafin: %s: %s\n", f->name, why);
            add_name(bad, sizeof bad, &rep->bad, f->name);
            rep->bad_whole += f->whole;
            if (apply) manifest_reset(m, e);
            continue;
        }
        if (apply && !*f->local) manifest_set_local(m, e, sha);
        if (apply && *f->pub && !f->verified) manifest_set_verified(m, e, 1);
        if (*f->pub) rep->verified++;
        else rep->local_only++;
    }
    if (show) progress_show(&pr, total, 1);
    int rc = apply ? manifest_commit(m) : 0;
    if (!rc && rep->bad)
        rc = df_fail("%d file(s) failed verification (%s)%s", rep->bad, bad,
                     apply ? ": their bytes were discarded; run the command again to fetch them anew" : "");
    return rc;
}

void installer_pinning(Installer *in, int *pinned, int *unidentified) {
    *pinned = *in->man.commit != 0, *unidentified = 0;
    if (in->unmanaged) return;
    for (int s = 0; s < in->cat->n_shards; s++) {
        const ManifestFile *f = &in->man.f[in->shard_entry[s]];
        *unidentified += !*f->pub && !*f->identity;
    }
}

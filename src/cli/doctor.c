/* deltafin doctor - a read-only health check of an install, without network: every file the model
 * needs parsed and checked (config, index, shard headers against the schema, the tokenizer),
 * sizes against the manifest, small files re-hashed against the hashes recorded for them (all
 * complete files with --verify), and plainly what each check could rely on: a published hash, or
 * sizes only. Exit status 0 when the install is usable (full, or streaming with the spine
 * complete), 1 otherwise. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/install_common.h"
#include "fetch/digest.h"
#include "fetch/installer.h"
#include "fetch/progress.h"
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/fileio.h"

#define DOCTOR_RECHECK_BYTES (64u << 20) /* files this small are hashed again on every run */
#define SUMS_FILE "SHA256SUMS"
#define SUMS_MAX_BYTES (1u << 20)

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

/* The SHA-256 of a file, or -1 with a message. */
static int file_sha256(const char *path, char hex[65]) {
    int fd = file_open_regular(path);
    if (fd < 0) return -1;
    Sha256 h;
    if (sha256_init(&h)) return close(fd), -1;
    static unsigned char buf[1 << 20];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) sha256_update(&h, buf, (size_t)n);
    int err = n < 0 ? errno : 0;
    close(fd);
    if (err) return sha256_abort(&h), df_fail("%s: %s", path, strerror(err));
    return sha256_final(&h, hex);
}

/* One line of SHA256SUMS ("<64 hex digits>  <name>" or "... *<name>", sha256sum's format) with a
 * plain file name of the model's directory; 0 with *sum and *name pointing into line, else -1. */
static int sums_line(char *line, char **sum, char **name) {
    size_t n = strlen(line);
    if (n < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) return -1;
    line[64] = 0, *sum = line, *name = line + 66;
    if (!is_hex_digest(line, 64)) return -1;
    for (const unsigned char *p = (const unsigned char *)*name; *p; p++)
        if (*p < 0x20 || *p == '/' || *p == 0x7f) return -1;
    return strcmp(*name, ".") && strcmp(*name, "..") ? 0 : -1;
}

/* A checkpoint's SHA256SUMS (the bundled model ships one): with verify, every file it lists is
 * hashed and compared; without, its lines are only read. Prints what it found; returns the
 * number of problems (a malformed SHA256SUMS, a missing or different file). */
static int check_sums(const char *dir, int verify) {
    char *path = path_join(dir, SUMS_FILE), *text;
    size_t len;
    struct stat st;
    int bad = 0, files = 0, line_no = 0;
    if (stat(path, &st) != 0) return free(path), 0;
    if (file_read_all(path, SUMS_MAX_BYTES, &text, &len)) {
        printf("BAD %s: %s\n", SUMS_FILE, df_errmsg());
        return free(path), 1;
    }
    for (char *line = text, *next; line && *line && bad < 20; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        char *sum, *name, hex[65];
        if (sums_line(line, &sum, &name)) {
            printf("BAD %s: line %d is not \"<SHA-256>  <file name>\"\n", SUMS_FILE, line_no), bad++;
            continue;
        }
        files++;
        if (!verify) continue;
        char *file = path_join(dir, name);
        if (file_sha256(file, hex)) printf("BAD %s: %s\n", name, df_errmsg()), bad++;
        else if (strcmp(hex, sum)) printf("BAD %s: its SHA-256 is %s, %s says %s\n", name, hex, SUMS_FILE, sum), bad++;
        free(file);
    }
    if (!files && !bad) printf("BAD %s: it lists no file\n", SUMS_FILE), bad++;
    if (!bad) printf(verify ? "%s: all %d files it lists verified\n" : "%s lists %d files (doctor --verify hashes them)\n",
                     SUMS_FILE, files);
    free(text), free(path);
    return bad;
}

/* No -m or DELTAFIN_ROOT and nothing installed: the bundled model that run, chat and serve use
 * then, else NULL (the install directory is checked, and reported missing). */
static const char *bundled_in_use(const Settings *set) {
    static ModelDir m;
    if (locate_model(set, MODEL_READ, &m) || !m.bundled) return NULL;
    return m.dir;
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
    const char *root = bundled_in_use(set);
    if (root)
        printf("no install in %s (deltafin setup puts K3 there); run, chat and serve use the bundled model: %s\n",
               cli_install_dir(set), root);
    else
        root = cli_install_dir(set);
    Installer *in;
    InstallOptions o = {root, INST_OFFLINE, 0, &set->engine.fetch};
    if (installer_open(&in, &o)) {
        printf("NOT USABLE: %s\n", df_errmsg());
        installer_close(in);
        return 1;
    }
    int bad = check_tokenizer(in);
    bad += check_sums(installer_root(in), verify);
    if (installer_unmanaged(in)) {
        struct stat st;
        char *sums = path_join(installer_root(in), SUMS_FILE);
        int has_sums = stat(sums, &st) == 0;
        free(sums);
        printf("%s: a checkpoint without %s (not installed by deltafin setup): config, index and every shard header "
               "are valid; %s\n%s\n",
               installer_root(in), MANIFEST_FILE,
               !has_sums ? "file contents have no recorded hash to check"
               : verify  ? "file contents match its SHA256SUMS"
                         : "doctor --verify checks file contents against its SHA256SUMS",
               bad ? "NOT USABLE: see above" : "ok");
        installer_close(in);
        return bad ? 1 : 0;
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

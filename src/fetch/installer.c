/* installer.c - opening an install: the revision, the metadata files, the shard headers, the
 * catalog. */
#include "fetch/installer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/digest.h"
#include "fetch/revision.h"
#include "format/config.h"
#include "format/index.h"
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/fileio.h"

#define META_MAX (512u << 20)

/* The files a Hugging Face K3 repository holds besides the shards. */
static const struct { const char *name; int required; } META[] = {
    {"config.json", 1},           {INDEX_FILE, 1},       {"tokenizer_config.json", 1},
    {"tiktoken.model", 1},        {"generation_config.json", 0}, {"chat_template.jinja", 0},
    {"special_tokens_map.json", 0},
};
#define N_META ((int)(sizeof META / sizeof META[0]))

static void keep_fetched(Installer *in, const char *name, const uint8_t *data, size_t len, const char *pub, int verified,
                         const char *identity, int shard) {
    in->fetched = df_realloc(in->fetched, sizeof *in->fetched * (size_t)(in->n_fetched + 1));
    FetchedFile *f = &in->fetched[in->n_fetched++];
    memset(f, 0, sizeof *f);
    f->name = df_strdup(name), f->data = df_malloc(len ? len : 1), f->len = len, f->shard = shard;
    memcpy(f->data, data, len);
    snprintf(f->pub, sizeof f->pub, "%s", pub);
    snprintf(f->identity, sizeof f->identity, "%s", identity);
    f->verified = verified;
}

/* An identity that names the bytes themselves (a SHA-256, as Hugging Face's X-Linked-ETag) means
 * the same on every mirror; an ordinary ETag only on the source that sent it. */
int installer_identity_comparable(const Installer *in, const char *identity) {
    return in->same_source || is_hex_digest(identity, 64);
}

/* The source's answer for a file against the pinned commit: a response from another commit is
 * another revision. An unpinned install pins to the first commit a response names. */
static int check_commit(Installer *in, const char *name, const RemoteInfo *info) {
    if (!*info->commit) return 0;
    if (!*in->src.commit) {
        source_pin(&in->src, info->commit);
        snprintf(in->pin_note, sizeof in->pin_note, "revision %s is commit %.12s (named by the server): every file is "
                 "fetched at this commit", in->src.revision, info->commit);
        return 0;
    }
    if (strcmp(in->src.commit, info->commit))
        return df_fail("%s: the server answered from commit %.12s, not from the pinned commit %.12s: refusing to mix "
                       "revisions", name, info->commit, in->src.commit);
    return 0;
}

/* What the revision API says of a file: its size must agree; its published hash is returned. */
static int api_facts(Installer *in, const char *name, uint64_t size, char pub[MANIFEST_PUB_MAX]) {
    pub[0] = 0;
    if (!in->have_rev) return 0;
    const RevisionFile *rf = revision_find(&in->rev, name);
    if (!rf) return df_fail("%s: not a file of revision %s (commit %.12s) according to the source's API", name,
                            in->src.revision, in->rev.commit);
    if (rf->have_size && size && rf->size != size)
        return df_fail("%s: the server's file is %llu bytes, the revision's API says %llu", name, (unsigned long long)size,
                       (unsigned long long)rf->size);
    revision_pub(rf, pub);
    return 0;
}

/* Bytes held in memory against a published hash; a mismatch names both. */
static int check_pub(const char *name, const void *data, size_t len, const char *pub) {
    char hex[65];
    if (!strncmp(pub, "sha256:", 7)) {
        if (sha256_hex_of(data, len, hex)) return df_failctx("%s", name);
        if (strcmp(hex, pub + 7)) return df_fail("%s: SHA-256 %s does not match the published %s", name, hex, pub + 7);
    } else if (!strncmp(pub, "git-sha1:", 9)) {
        if (git_blob_sha1_hex(data, len, hex)) return df_failctx("%s", name);
        if (strcmp(hex, pub + 9)) return df_fail("%s: git blob SHA-1 %s does not match the published %s", name, hex, pub + 9);
    }
    return 0;
}

/* The local copy of a metadata file, when it can stand for the source's: recorded whole at the
 * pinned commit, with the SHA-256 computed when it was written. */
static int local_meta(Installer *in, const char *name, char **text, size_t *len) {
    int e = manifest_find(&in->man, name);
    if (e < 0 || !*in->src.commit || strcmp(in->man.commit, in->src.commit)) return 0;
    ManifestFile *f = &in->man.f[e];
    if (!f->whole || !*f->local || !manifest_has(&in->man, e, 0, f->size)) return 0;
    char *path = path_join(in->root, name), hex[65];
    int ok = file_read_all(path, META_MAX, text, len) == 0;
    free(path);
    if (ok && *len == f->size && !sha256_hex_of(*text, *len, hex) && !strcmp(hex, f->local)) return 1;
    if (ok) free(*text);
    *text = NULL;
    df_errclear();
    return 0;
}

/* A metadata file: the local copy when it is current, else fetched whole, checked (size and hash
 * against what the source publishes) and kept for installer_write_fetched. *text receives its
 * contents (caller frees); NULL for an optional file the source lacks. */
static int get_meta(Installer *in, Conn *c, int k, char **text, size_t *len) {
    const char *name = META[k].name;
    *text = NULL, *len = 0;
    if (local_meta(in, name, text, len)) return 0;
    RemoteInfo info;
    int missing;
    if (http_whole_retry(c, name, META_MAX, text, len, &info, &missing)) {
        if (missing && !META[k].required && !(in->have_rev && revision_find(&in->rev, name))) return df_errclear(), 0;
        return -1;
    }
    char pub[MANIFEST_PUB_MAX];
    int rc = check_commit(in, name, &info);
    if (!rc) rc = api_facts(in, name, *len, pub);
    if (!rc && !*pub && *info.sha256) snprintf(pub, sizeof pub, "sha256:%s", info.sha256);
    if (!rc) rc = check_pub(name, *text, *len, pub);
    if (!rc) keep_fetched(in, name, (const uint8_t *)*text, *len, pub, *pub != 0, info.identity, -1);
    if (rc) free(*text), *text = NULL;
    return rc;
}

static int pwrite_full(int fd, const uint8_t *p, size_t n, uint64_t off, const char *label) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, p + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return df_fail("%s: write failed: %s", label, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    return 0;
}

int installer_open_shard(Installer *in, int s) {
    ManifestFile *f = &in->man.f[in->shard_entry[s]];
    if (f->fd >= 0) return 0;
    char *path = path_join(in->root, f->name);
    struct stat st;
    /* a shard may be a link to a file elsewhere (another disk), never a pipe or a device */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        int rc = df_fail("%s: not a regular file: refusing to write a shard into it", path);
        free(path);
        return rc;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    int rc = fd < 0 || fstat(fd, &st) ? df_fail("%s: cannot open for writing: %s", path, strerror(errno)) : 0;
    if (!rc && !S_ISREG(st.st_mode)) rc = df_fail("%s: not a regular file: refusing to write a shard into it", path);
    if (!rc && (uint64_t)st.st_size != f->size) {
        /* a shard of the wrong size holds nothing the manifest may vouch for */
        if (manifest_present_bytes(&in->man, in->shard_entry[s]))
            fprintf(stderr, "deltafin: %s is %lld bytes, expected %llu: fetching it again\n", f->name, (long long)st.st_size,
                    (unsigned long long)f->size);
        manifest_reset(&in->man, in->shard_entry[s]);
        if (ftruncate(fd, 0) || ftruncate(fd, (off_t)f->size)) rc = df_fail("%s: cannot size: %s", path, strerror(errno));
    }
    free(path);
    if (rc) {
        if (fd >= 0) close(fd);
        return -1;
    }
    f->fd = fd;
    return 0;
}

/* When setup moves an install to another source: whether that source's file is the one whose
 * bytes the install holds. Only what names the bytes themselves counts: the same published hash,
 * the same SHA-256 identity, or both sources pinned to the same commit (another mirror's ETag
 * says nothing about these bytes). */
static int tied_to_install(const Installer *in, const ManifestFile *f, const char *pub, const char *identity) {
    if (*pub && !strcmp(pub, f->pub)) return 1;
    if (is_hex_digest(identity, 64) && !strcmp(identity, f->identity)) return 1;
    return *in->src.commit && !strcmp(in->src.commit, in->man.commit);
}

/* Shard s's header from the source: 8 bytes (learning the file's size, identity and published
 * hash), then the JSON, which must come from the same version of the file. A size, hash or
 * identity that differs from the manifest's resets the shard's entry. */
static int refresh_header(Installer *in, Conn *c, const char *name, int s, StHeader *h) {
    uint8_t len8[8];
    RemoteInfo info;
    if (http_range_retry(c, name, 0, 8, NULL, -1, len8, &info)) return -1;
    char pub[MANIFEST_PUB_MAX];
    if (check_commit(in, name, &info) || api_facts(in, name, info.total, pub)) return -1;
    if (*pub && *info.sha256 && strcmp(pub + 7, info.sha256))
        return df_fail("%s: the server publishes SHA-256 %s, the revision's API %s", name, info.sha256, pub + 7);
    if (!*pub && *info.sha256) snprintf(pub, sizeof pub, "sha256:%s", info.sha256);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER_BYTES || 8 + hlen > info.total)
        return df_fail("%s: header length %llu is not plausible for a %llu-byte file", name, (unsigned long long)hlen,
                       (unsigned long long)info.total);
    uint8_t *hdr = df_malloc(8 + hlen);
    memcpy(hdr, len8, 8);
    int rc = http_range_retry(c, name, 8, hlen, &info, -1, hdr + 8, NULL);
    if (!rc) rc = st_parse_header(h, (const char *)hdr + 8, hlen, s, name);
    if (!rc && h->data_start + h->data_size != info.total)
        rc = df_fail("%s: the header describes %llu bytes, the server's file is %llu", name,
                     (unsigned long long)(h->data_start + h->data_size), (unsigned long long)info.total);
    if (!rc) {
        int reset = 0, e = manifest_find(&in->man, name);
        /* another source: two published hashes compare (a difference resets the entry below, as
         * a change on the server); without them only a tie keeps the bytes */
        if (e >= 0 && in->switching && !(*pub && *in->man.f[e].pub) && !tied_to_install(in, &in->man.f[e], pub, info.identity)) {
            if (manifest_present_bytes(&in->man, e))
                fprintf(stderr, "deltafin: %s: nothing ties the bytes installed from %s to %s: fetching it again\n", name,
                        in->man.source, in->src.repo);
            manifest_reset(&in->man, e);
        }
        int adopt = e >= 0 && !installer_identity_comparable(in, in->man.f[e].identity);
        ManifestFacts facts = {info.total, 0, pub, info.identity, adopt};
        e = manifest_entry(&in->man, name, &facts, &reset);
        if (reset) fprintf(stderr, "deltafin: %s changed on the server: fetching it again\n", name);
        in->shard_entry[s] = e;
        keep_fetched(in, name, hdr, 8 + hlen, "", 0, "", s);
    }
    free(hdr);
    return rc;
}

/* The revision asked for, resolved by the source's revision API to a commit that every later
 * request names, with each file's size and published hash. A source without the API (a plain
 * mirror) is noted; the first response naming its commit (X-Repo-Commit) may still pin it. */
static int pin_revision(Installer *in, Conn *c) {
    char *url = source_api_url(&in->src), *text = NULL;
    size_t len;
    long status = 0;
    int rc = http_api_retry(c, url, 64u << 20, &text, &len, &status);
    if (rc && status && status != 401 && status != 403 && !resp_status_transient(status)) rc = 0, status = -status;
    if (!rc && status > 0 && revision_parse(&in->rev, text, len, url)) {
        /* a mirror that answers every path with a page of its own has no API either */
        revision_free(&in->rev);
        status = -status;
    } else if (!rc && status > 0) {
        in->have_rev = 1;
        source_pin(&in->src, in->rev.commit);
        snprintf(in->pin_note, sizeof in->pin_note, "revision %s is commit %.12s: every file is fetched at this commit",
                 in->src.revision, in->rev.commit);
    }
    if (status < 0)
        snprintf(in->pin_note, sizeof in->pin_note, "the source has no revision API (HTTP %ld at %s)", -status, url);
    if (!rc) df_errclear();
    free(url), free(text);
    return rc;
}

/* The tokenizer files must form a tokenizer of the config's vocabulary (a damaged tiktoken.model
 * is refused here, not when text is first encoded). */
static int check_tokenizer(const char *ranks, size_t ranks_len, const char *config, size_t config_len, int vocab) {
    Tokenizer *t = tok_parse(ranks, ranks_len, "tiktoken.model", config, config_len, "tokenizer_config.json");
    if (!t) return -1;
    int rc = tok_vocab_size(t) == vocab ? 0
                                        : df_fail("tiktoken.model: %d ids with the special tokens, config.json says "
                                                  "vocab_size %d",
                                                  tok_vocab_size(t), vocab);
    tok_free(t);
    return rc;
}

static int refresh(Installer *in) {
    Conn *c = conn_new(&in->src, in->urls);
    if (!c) return -1;
    char *text[N_META] = {0};
    size_t len[N_META] = {0};
    int rc = pin_revision(in, c);
    if (!rc && in->switching)
        fprintf(stderr, "deltafin: %s was installed from %s; the settings name %s: moving the install there (files "
                        "whose bytes nothing ties to the new source are fetched again)\n",
                in->root, in->man.source, in->src.repo);
    if (!rc && *in->man.commit && *in->src.commit && strcmp(in->man.commit, in->src.commit))
        fprintf(stderr, "deltafin: %s moved from commit %.12s to %.12s since this install: files that changed are "
                        "fetched again\n", in->src.revision, in->man.commit, in->src.commit);
    for (int k = 0; k < N_META && !rc; k++) rc = get_meta(in, c, k, &text[k], &len[k]);
    K3Config cfg;
    ShardIndex ix = {0};
    if (!rc) rc = config_parse(&cfg, text[0], len[0], "config.json");
    if (!rc) rc = index_parse(&ix, text[1], len[1], INDEX_FILE);
    if (!rc) rc = check_tokenizer(text[3], len[3], text[2], len[2], cfg.vocab);
    int n = ix.n_shards;
    StHeader *headers = df_calloc((size_t)n, sizeof *headers);
    in->shard_entry = df_calloc((size_t)n, sizeof *in->shard_entry);
    int tty = isatty(2);
    for (int s = 0; s < n && !rc; s++) {
        rc = refresh_header(in, c, ix.shards[s], s, &headers[s]);
        if (!rc && tty) fprintf(stderr, "\rshard headers %d/%d", s + 1, n);
    }
    if (!rc) fprintf(stderr, "%sshard headers: %d read from the source\n", tty ? "\r" : "", n);
    if (!rc) {
        rc = catalog_build(&in->own, in->root, &cfg, headers, ix.shards, n);
        in->have_own = !rc;
    } else {
        for (int s = 0; s < n; s++) st_header_free(&headers[s]);
    }
    if (!rc && !*in->pin_note)
        snprintf(in->pin_note, sizeof in->pin_note, "the source names no commit (no revision API, no X-Repo-Commit)");
    if (!rc && in->switching) in->same_source = 1; /* what was kept is tied to the new source */
    index_free(&ix);
    free(headers);
    for (int k = 0; k < N_META; k++) free(text[k]);
    conn_free(c);
    return rc;
}

/* A shard header fetched by the refresh: a recorded local copy that differs means the shard
 * changed upstream (start it over); a missing one is written. */
static int write_header(Installer *in, const FetchedFile *ff) {
    int e = in->shard_entry[ff->shard];
    if (installer_open_shard(in, ff->shard)) return -1;
    ManifestFile *f = &in->man.f[e];
    if (manifest_has(&in->man, e, 0, ff->len)) {
        uint8_t *local = df_malloc(ff->len);
        int rc = file_pread_full(f->fd, local, ff->len, 0, ff->name);
        if (!rc && memcmp(local, ff->data, ff->len)) {
            fprintf(stderr, "deltafin: %s: header changed on the server: fetching it again\n", ff->name);
            manifest_reset(&in->man, e);
        }
        free(local);
        if (rc) return -1;
    }
    if (manifest_has(&in->man, e, 0, ff->len)) return 0;
    if (pwrite_full(f->fd, ff->data, ff->len, 0, ff->name)) return -1;
    manifest_add_written(&in->man, e, 0, ff->len);
    return 0;
}

static int write_meta(Installer *in, const FetchedFile *ff) {
    char *path = path_join(in->root, ff->name), hex[65];
    int reset, rc = file_write_atomic(path, ff->data, ff->len);
    free(path);
    if (rc) return -1;
    ManifestFacts facts = {ff->len, 1, ff->pub, ff->identity, 1};
    int e = manifest_entry(&in->man, ff->name, &facts, &reset);
    manifest_add_written(&in->man, e, 0, ff->len);
    manifest_set_verified(&in->man, e, ff->verified); /* checked when fetched */
    if (sha256_hex_of(ff->data, ff->len, hex)) return df_failctx("%s", ff->name);
    manifest_set_local(&in->man, e, hex);
    return 0;
}

uint64_t installer_fetched_bytes(const Installer *in) {
    uint64_t n = 0;
    for (int i = 0; i < in->n_fetched; i++) n += in->fetched[i].len;
    return n;
}

int installer_write_fetched(Installer *in) {
    if (in->dry_run) return df_fail("installer_write_fetched: opened as a dry run");
    int rc = file_mkdirs(in->root);
    manifest_set_revision(&in->man, in->src.repo, in->src.revision, in->src.commit);
    for (int i = 0; i < in->n_fetched && !rc; i++)
        rc = in->fetched[i].shard < 0 ? write_meta(in, &in->fetched[i]) : write_header(in, &in->fetched[i]);
    if (!rc) rc = manifest_commit(&in->man);
    for (int i = 0; i < in->n_fetched; i++) free(in->fetched[i].name), free(in->fetched[i].data);
    free(in->fetched);
    in->fetched = NULL, in->n_fetched = 0;
    return rc;
}

static int bind_shards(Installer *in);

/* The catalog from the root's own files; every shard must have a manifest entry. */
static int open_local(Installer *in) {
    if (catalog_open(&in->own, in->root)) return df_failctx("the install in %s is incomplete (run deltafin setup)", in->root);
    in->have_own = 1;
    if (access(in->man.path, F_OK) != 0) { /* a checkpoint made some other way: complete files */
        in->unmanaged = 1;
        return 0;
    }
    return bind_shards(in);
}

/* 1 when shard s's file on disk is not of the size the manifest records (or is missing). */
static int shard_misfits(const Installer *in, int s) {
    char *path = path_join(in->root, in->man.f[in->shard_entry[s]].name);
    struct stat st;
    int misfits = stat(path, &st) != 0 || (uint64_t)st.st_size != in->man.f[in->shard_entry[s]].size;
    free(path);
    return misfits;
}

/* Every shard of the catalog must have a manifest entry of its size. Shards are opened for writing
 * only when something is fetched into them (a complete install is used read-only), except that
 * with fetching allowed a shard file of the wrong size is reset and sized now. */
static int bind_shards(Installer *in) {
    in->shard_entry = df_calloc((size_t)in->cat->n_shards, sizeof *in->shard_entry);
    for (int s = 0; s < in->cat->n_shards; s++) {
        int e = manifest_find(&in->man, in->cat->shards[s].file);
        if (e < 0 || in->man.f[e].size != in->cat->shards[s].size)
            return df_fail("%s: not recorded in %s with its size (run deltafin setup)", in->cat->shards[s].file, MANIFEST_FILE);
        in->shard_entry[s] = e;
        if (in->access == INST_ONLINE && shard_misfits(in, s) && installer_open_shard(in, s)) return -1;
    }
    return 0;
}

/* The host ("https://h", "http://h:port") and repository path of the source a manifest records:
 * "https://h/owner/name" (a version 1 manifest recorded ".../resolve/REV/" after it). The manifest
 * is input like any other: both are validated as the settings would be. */
static int recorded_source(const Manifest *m, char host[300], char path[208]) {
    const char *src = m->source, *sep = strstr(src, "://"), *slash = sep ? strchr(sep + 3, '/') : NULL;
    const char *resolve = slash && m->version == 1 ? strstr(slash, "/resolve/") : NULL;
    size_t hl = slash ? (size_t)(slash - src) : 0, pl = slash ? (resolve ? (size_t)(resolve - slash - 1) : strlen(slash + 1)) : 0;
    int loopback, http;
    if (!slash || hl >= 300 || pl >= 208) return df_fail("%s: source %s: not https://HOST/OWNER/NAME", m->path, src);
    snprintf(host, 300, "%.*s", (int)hl, src);
    snprintf(path, 208, "%.*s", (int)pl, slash + 1);
    if (source_check_host(host, &loopback, &http) || source_check_path(path)) return df_failctx("%s: source", m->path);
    return 0;
}

/* The settings' source for this install: every part they name (FetchOptions.given), else the part
 * the manifest records (else the default). host and path hold the recorded parts. */
static int wanted_options(const Manifest *m, const FetchOptions *fetch, FetchOptions *o, char host[300], char path[208]) {
    *o = *fetch;
    if (*m->source) {
        if (recorded_source(m, host, path)) return -1;
        if (!(o->given & FETCH_GIVEN_HOST)) o->host = host;
        if (!(o->given & FETCH_GIVEN_PATH)) o->path = path;
    }
    if (*m->revision && !(o->given & FETCH_GIVEN_REVISION)) o->revision = m->revision;
    return 0;
}

/* 1 when repo ("https://host/path") is the source the manifest records. */
static int is_recorded_source(const Manifest *m, const char *repo) {
    size_t rl = strlen(repo);
    return !*m->source || !strcmp(m->source, repo) ||
           (m->version == 1 && !strncmp(m->source, repo, rl) && !strncmp(m->source + rl, "/resolve/", 9));
}

/* The settings that named the source's repository (FetchOptions.given), as messages name them. */
static const char *repo_settings(unsigned given, int *several) {
    unsigned g = given & (FETCH_GIVEN_HOST | FETCH_GIVEN_PATH);
    *several = g != FETCH_GIVEN_HOST && g != FETCH_GIVEN_PATH;
    return g == FETCH_GIVEN_HOST ? "K3_HF_HOST" : g == FETCH_GIVEN_PATH ? "K3_HF_PATH" : "K3_HF_HOST and K3_HF_PATH";
}

/* Why the source s may not complete this install ("" when it may): another repository, or another
 * revision than the install's. */
static void source_refusal(const char *root, const Manifest *m, unsigned given, const Source *s, char *why, size_t n) {
    char pinned[80] = "";
    if (*m->commit) snprintf(pinned, sizeof pinned, " at commit %.12s", m->commit);
    why[0] = 0;
    if (!is_recorded_source(m, s->repo)) {
        int several;
        const char *named = repo_settings(given, &several);
        snprintf(why, n, "%s was installed from %s (revision %s%s); %s name%s %s: refusing to fetch its missing files "
                         "from another source, whose bytes nothing ties to the installed revision: unset %s to fetch "
                         "from %s, or run deltafin setup with these settings to move the whole install there",
                 root, m->source, *m->revision ? m->revision : "?", pinned, named, several ? "" : "s", s->repo, named,
                 m->source);
    } else if (*m->revision && strcmp(m->revision, s->revision)) {
        snprintf(why, n, "%s is an install of revision %s%s; K3_HF_REVISION asks for %s: run deltafin setup to switch "
                         "revisions", root, m->revision, pinned, s->revision);
    }
}

int installer_source_mismatch(Installer *in, const FetchOptions *fetch, char *why, size_t n) {
    char host[300], path[208];
    FetchOptions o;
    Source s;
    if (wanted_options(&in->man, fetch, &o, host, path) || source_init(&s, &o)) return -1;
    source_refusal(in->root, &in->man, fetch->given, &s, why, n);
    return *why != 0;
}

/* The source for fetching into an install: its own (the one the manifest records, at its revision
 * and pinned commit) unless the settings name another. Fetching from another one is refused when
 * asked (no_fetch); setup (REFRESH) moves the install there instead, keeping only what is tied to
 * the new source. */
static int bind_source(Installer *in, int quick) {
    char host[300], path[208];
    FetchOptions o;
    if (wanted_options(&in->man, &in->fetch, &o, host, path) || source_init(&in->src, &o)) return -1;
    if (quick) { /* a dry run: an unreachable source fails in seconds, not after a minute of retries */
        if (in->src.retries > 1) in->src.retries = 1;
        if (in->src.connect_timeout_s > 10) in->src.connect_timeout_s = 10;
    }
    in->urls = urlcache_new();
    in->has_source = 1;
    Manifest *m = &in->man;
    in->same_source = is_recorded_source(m, in->src.repo);
    if (in->access == INST_REFRESH) {
        in->switching = !in->same_source;
        return 0;
    }
    source_refusal(in->root, m, in->fetch.given, &in->src, in->no_fetch, sizeof in->no_fetch);
    if (*m->commit) source_pin(&in->src, m->commit);
    return 0;
}

int installer_open(Installer **out, const InstallOptions *o) {
    Installer *in = df_calloc(1, sizeof *in);
    in->cat = &in->own;
    in->fetch = *o->fetch;
    in->root = df_strdup(o->root);
    in->access = o->access, in->dry_run = o->access == INST_REFRESH && o->dry_run;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    *out = in;
    int rc = manifest_load(&in->man, in->root);
    if (!rc && o->access != INST_OFFLINE) rc = bind_source(in, o->dry_run);
    if (!rc) rc = o->access == INST_REFRESH ? refresh(in) : open_local(in);
    return rc;
}

int installer_attach(Installer **out, const Catalog *cat, InstallAccess mode, const FetchOptions *fetch) {
    Installer *in = df_calloc(1, sizeof *in);
    in->cat = cat;
    in->fetch = *fetch;
    in->root = df_strdup(cat->dir);
    in->access = mode == INST_REFRESH ? INST_ONLINE : mode;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    *out = in;
    int rc = manifest_load(&in->man, in->root);
    if (rc) return -1;
    if (access(in->man.path, F_OK) != 0) { /* a plain checkpoint directory: complete by definition */
        in->unmanaged = 1;
        return 0;
    }
    if (in->access == INST_ONLINE && bind_source(in, 0)) return -1;
    return bind_shards(in);
}

void installer_close(Installer *in) {
    if (!in) return;
    /* record what was written, and any reset (a reset shard must not keep its old ranges) */
    if (in->access != INST_OFFLINE && !in->dry_run && in->man.path && (in->man.n_w || in->man.dirty) &&
        access(in->root, F_OK) == 0)
        manifest_commit(&in->man);
    for (int i = 0; i < in->man.n; i++)
        if (in->man.f[i].fd >= 0) close(in->man.f[i].fd);
    for (int i = 0; i < in->n_idle; i++) conn_free(in->idle[i]);
    urlcache_free(in->urls);
    for (int i = 0; i < in->n_fetched; i++) free(in->fetched[i].name), free(in->fetched[i].data);
    free(in->fetched);
    free(in->idle), free(in->inflight);
    revision_free(&in->rev);
    if (in->have_own) catalog_free(&in->own);
    manifest_free(&in->man);
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    free(in->shard_entry), free(in->root), free(in);
}

const Catalog *installer_catalog(const Installer *in) { return in->cat; }
const char *installer_pin_note(const Installer *in) { return in->pin_note; }
int installer_unmanaged(const Installer *in) { return in->unmanaged; }
Manifest *installer_manifest(Installer *in) { return &in->man; }
const char *installer_root(const Installer *in) { return in->root; }
int installer_shard_entry(const Installer *in, int shard) { return in->unmanaged ? -1 : in->shard_entry[shard]; }

void installer_expect(const Installer *in, int e, RemoteInfo *x) {
    const ManifestFile *f = &in->man.f[e];
    memset(x, 0, sizeof *x);
    x->total = f->size;
    if (*f->identity && installer_identity_comparable(in, f->identity)) snprintf(x->identity, sizeof x->identity, "%s", f->identity);
    snprintf(x->commit, sizeof x->commit, "%s", in->src.commit);
}

int installer_write_errno(const char *root) {
    /* the effective ids decide, and a read-only mount answers EROFS whoever asks */
    if (faccessat(AT_FDCWD, root, W_OK | X_OK, AT_EACCESS) == 0 || errno == ENOENT) return 0;
    return errno;
}

int installer_check_writable(const char *root, const char *need, const char *todo) {
    int err = installer_write_errno(root);
    if (!err) return 0;
    return df_fail("%s is not writable here (%s): %s needs write access to it; %s", root, strerror(err), need, todo);
}

int installer_may_fetch(Installer *in) {
    if (*in->no_fetch) return df_fail("%s", in->no_fetch);
    char todo[1200];
    snprintf(todo, sizeof todo, "run `deltafin fetch --root %s` as a user who may write there (the install's owner), "
             "or where it is mounted read-write", in->root);
    return installer_check_writable(in->root, "fetching what the install lacks", todo);
}

const char *installer_source(const Installer *in) {
    return in->has_source ? in->src.display : *in->man.source ? in->man.source : "?";
}

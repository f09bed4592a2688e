/* installer.c - opening an install: the metadata files, the shard headers, the catalog. */
#include "fetch/installer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/sha256.h"
#include "format/config.h"
#include "util/err.h"
#include "util/fileio.h"

#define INDEX_FILE "model.safetensors.index.json"
#define META_MAX (512u << 20)

/* The files a Hugging Face K3 repository holds besides the shards. */
static const struct { const char *name; int required; } META[] = {
    {"config.json", 1},           {INDEX_FILE, 1},       {"tokenizer_config.json", 1},
    {"tiktoken.model", 1},        {"generation_config.json", 0}, {"chat_template.jinja", 0},
    {"special_tokens_map.json", 0},
};
#define N_META ((int)(sizeof META / sizeof META[0]))

static void keep_fetched(Installer *in, const char *name, const uint8_t *data, size_t len, const char *sha, int shard) {
    in->fetched = df_realloc(in->fetched, sizeof *in->fetched * (size_t)(in->n_fetched + 1));
    FetchedFile *f = &in->fetched[in->n_fetched++];
    f->name = df_strdup(name), f->data = df_malloc(len ? len : 1), f->len = len, f->shard = shard;
    memcpy(f->data, data, len);
    snprintf(f->sha256, sizeof f->sha256, "%s", sha);
}

/* A metadata file present and recorded is reused; otherwise it is fetched whole (and kept for
 * installer_write_fetched). *text receives its contents (caller frees). */
static int get_meta(Installer *in, Conn *c, int k, char **text, size_t *len) {
    const char *name = META[k].name;
    char *path = path_join(in->root, name);
    int e = manifest_find(&in->man, name);
    struct stat st;
    int rc = 0;
    *text = NULL, *len = 0;
    if (e >= 0 && in->man.f[e].whole && manifest_has(&in->man, e, 0, in->man.f[e].size) && stat(path, &st) == 0 &&
        (uint64_t)st.st_size == in->man.f[e].size) {
        rc = file_read_all(path, META_MAX, text, len);
        free(path);
        return rc;
    }
    RemoteInfo info;
    int missing;
    if (http_whole_retry(c, name, META_MAX, text, len, &info, &missing)) {
        free(path);
        if (missing && !META[k].required) return df_errclear(), 0;
        return -1;
    }
    if (*info.sha256) { /* published LFS hash: check it now, the file is in memory */
        Sha256 h;
        uint8_t d[32];
        char hex[65];
        sha256_init(&h), sha256_update(&h, *text, *len), sha256_final(&h, d), sha256_hex(d, hex);
        if (strcmp(hex, info.sha256)) rc = df_fail("%s: SHA-256 %s does not match the published %s", name, hex, info.sha256);
    }
    if (!rc) keep_fetched(in, name, (const uint8_t *)*text, *len, info.sha256, -1);
    free(path);
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

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Distinct shard names of the index's weight_map, sorted, each of the form catalog_shard_name
 * writes and forming the set 1..N of N. */
static int shard_names(const char *text, size_t len, char ***out, int *n_out) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *map = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(root);
        return df_fail(INDEX_FILE ": invalid JSON or no weight_map object");
    }
    char **names = NULL;
    int n = 0, rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        const char *s = json_string_value(v);
        int a, b, used = 0;
        if (!s || sscanf(s, "model-%5d-of-%6d.safetensors%n", &a, &b, &used) != 2 || (size_t)used != strlen(s) || a < 1 ||
            a > b || b > 100000) {
            rc = df_fail(INDEX_FILE ": weight_map.%s: not a shard name", key);
            break;
        }
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(names[i], s);
        if (seen) continue;
        names = df_realloc(names, sizeof *names * (size_t)(n + 1));
        names[n++] = df_strdup(s);
    }
    json_decref(root);
    if (!rc && !n) rc = df_fail(INDEX_FILE ": weight_map is empty");
    if (!rc) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n && !rc; i++) {
        char want[64];
        catalog_shard_name(want, sizeof want, i + 1, n);
        if (strcmp(want, names[i])) rc = df_fail(INDEX_FILE ": shard set is not 1..%d of %d: expected %s, found %s", n, n, want, names[i]);
    }
    *out = names, *n_out = n;
    return rc;
}

int installer_open_shard(Installer *in, int s) {
    ManifestFile *f = &in->man.f[in->shard_entry[s]];
    if (f->fd >= 0) return 0;
    char *path = path_join(in->root, f->name);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    int rc = fd < 0 || fstat(fd, &st) ? df_fail("%s: cannot open for writing: %s", path, strerror(errno)) : 0;
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

/* Shard s's header from the source: 8 bytes (learning the file size and published hash), then
 * the JSON. A size or hash that differs from the manifest's resets the shard's entry. */
static int refresh_header(Installer *in, Conn *c, const char *name, int s, StHeader *h) {
    uint8_t len8[8];
    RemoteInfo info;
    if (http_range_retry(c, name, 0, 8, 0, -1, len8, &info)) return -1;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER_BYTES || 8 + hlen > info.total)
        return df_fail("%s: header length %llu is not plausible for a %llu-byte file", name, (unsigned long long)hlen,
                       (unsigned long long)info.total);
    uint8_t *hdr = df_malloc(8 + hlen);
    memcpy(hdr, len8, 8);
    int rc = http_range_retry(c, name, 8, hlen, info.total, -1, hdr + 8, NULL);
    if (!rc) rc = st_parse_header(h, (const char *)hdr + 8, hlen, s, name);
    if (!rc && h->data_start + h->data_size != info.total)
        rc = df_fail("%s: the header describes %llu bytes, the server's file is %llu", name,
                     (unsigned long long)(h->data_start + h->data_size), (unsigned long long)info.total);
    int reset = 0, e = rc ? -1 : manifest_entry(&in->man, name, info.total, info.sha256, 0, &reset);
    if (reset) fprintf(stderr, "deltafin: %s changed on the server: fetching it again\n", name);
    if (!rc) in->shard_entry[s] = e;
    if (!rc) keep_fetched(in, name, hdr, 8 + hlen, "", s);
    free(hdr);
    return rc;
}

static int refresh(Installer *in) {
    Conn *c = conn_new(&in->src, in->urls);
    if (!c) return -1;
    char *cfg_text = NULL, *index = NULL, *other;
    size_t cfg_len = 0, index_len = 0, len;
    int rc = 0;
    for (int k = 0; k < N_META && !rc; k++) {
        rc = get_meta(in, c, k, &other, &len);
        if (k == 0) cfg_text = other, cfg_len = len;
        else if (k == 1) index = other, index_len = len;
        else free(other);
    }
    K3Config cfg;
    char **names = NULL;
    int n = 0;
    if (!rc) rc = config_parse(&cfg, cfg_text, cfg_len, "config.json");
    if (!rc) rc = shard_names(index, index_len, &names, &n);
    StHeader *headers = df_calloc((size_t)n, sizeof *headers);
    in->shard_entry = df_calloc((size_t)n, sizeof *in->shard_entry);
    int tty = isatty(2);
    for (int s = 0; s < n && !rc; s++) {
        rc = refresh_header(in, c, names[s], s, &headers[s]);
        if (!rc && tty) fprintf(stderr, "\rshard headers %d/%d", s + 1, n);
    }
    if (!rc) fprintf(stderr, "%sshard headers: %d read from the source\n", tty ? "\r" : "", n);
    if (!rc) {
        rc = catalog_build(&in->own, in->root, &cfg, headers, names, n);
        in->have_own = !rc;
    } else {
        for (int s = 0; s < n; s++) st_header_free(&headers[s]);
    }
    for (int s = 0; s < n; s++) free(names[s]);
    free(names), free(headers), free(cfg_text), free(index);
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
    char *path = path_join(in->root, ff->name);
    int reset, rc = file_write_atomic(path, ff->data, ff->len);
    free(path);
    if (rc) return -1;
    int e = manifest_entry(&in->man, ff->name, ff->len, ff->sha256, 1, &reset);
    manifest_add_written(&in->man, e, 0, ff->len);
    if (*ff->sha256) manifest_set_verified(&in->man, e, 1); /* checked when fetched */
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

/* Every shard of the catalog must have a manifest entry of its size. */
static int bind_shards(Installer *in) {
    in->shard_entry = df_calloc((size_t)in->cat->n_shards, sizeof *in->shard_entry);
    for (int s = 0; s < in->cat->n_shards; s++) {
        int e = manifest_find(&in->man, in->cat->shards[s].file);
        if (e < 0 || in->man.f[e].size != in->cat->shards[s].size)
            return df_fail("%s: not recorded in %s with its size (run deltafin setup)", in->cat->shards[s].file, MANIFEST_FILE);
        in->shard_entry[s] = e;
        if (in->access == INST_ONLINE && installer_open_shard(in, s)) return -1;
    }
    return 0;
}

int installer_open(Installer **out, const char *root, InstallAccess access, int dry_run, const FetchOptions *fetch) {
    Installer *in = df_calloc(1, sizeof *in);
    in->cat = &in->own;
    in->fetch = *fetch;
    in->root = df_strdup(root);
    in->access = access, in->dry_run = access == INST_REFRESH && dry_run;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    *out = in;
    int rc = manifest_load(&in->man, in->root);
    if (!rc && access != INST_OFFLINE) {
        rc = source_init(&in->src, fetch);
        in->has_source = !rc;
        in->urls = urlcache_new();
        if (!rc) snprintf(in->man.source, sizeof in->man.source, "%s", in->src.base);
    }
    if (!rc) rc = access == INST_REFRESH ? refresh(in) : open_local(in);
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
    if (in->access == INST_ONLINE) {
        rc = source_init(&in->src, fetch);
        in->has_source = !rc;
        in->urls = urlcache_new();
    }
    return rc ? -1 : bind_shards(in);
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
    if (in->have_own) catalog_free(&in->own);
    manifest_free(&in->man);
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    free(in->shard_entry), free(in->root), free(in);
}

const Catalog *installer_catalog(const Installer *in) { return in->cat; }
int installer_unmanaged(const Installer *in) { return in->unmanaged; }
Manifest *installer_manifest(Installer *in) { return &in->man; }
const char *installer_root(const Installer *in) { return in->root; }
int installer_shard_entry(const Installer *in, int shard) { return in->unmanaged ? -1 : in->shard_entry[shard]; }

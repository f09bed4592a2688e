/* prompt_cache.c - prompt States kept on disk (prompt_cache.h). */
#include "engine/prompt_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "engine/statefile.h"
#include "fetch/digest.h"
#include "util/err.h"
#include "util/platform.h"
#include "util/fileio.h"

#define SUFFIX ".dfstate"
#define NAME_BYTES (64 + sizeof SUFFIX) /* the tokens' SHA-256 in hex, the suffix and a NUL */

typedef struct {
    char name[NAME_BYTES];
    TokIds toks;            /* (stale entries: none) */
    uint64_t bytes;
    struct timespec used;   /* modification time: written or last restored */
    int stale;              /* written under another identity or format */
} Entry;

struct PromptCache {
    Engine *e;
    PromptCacheOptions o;
    char *dir;
    StateIdentity id;
    Entry *v;
    int n, cap;
    uint64_t bytes;
    int said_too_big;       /* the "larger than the bound" line is logged once */
    pthread_mutex_t mu;     /* guards counts (the index itself is the model thread's) */
    PromptCacheCounts counts;
};

/* The index's totals into counts, for readers on other threads. */
static void index_changed(PromptCache *c) {
    int entries = 0, stale = 0;
    for (int i = 0; i < c->n; i++) c->v[i].stale ? stale++ : entries++;
    pthread_mutex_lock(&c->mu);
    c->counts.entries = entries, c->counts.stale = stale, c->counts.bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}

static void say(PromptCache *c, const char *fmt, ...) DF_PRINTF(2, 3);
static void say(PromptCache *c, const char *fmt, ...) {
    if (!c->o.log) return;
    char line[1024];
    int n = snprintf(line, sizeof line, "prompt cache: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    c->o.log(c->o.log_ctx, line);
}

static void count(PromptCache *c, uint64_t *field, uint64_t by) {
    pthread_mutex_lock(&c->mu);
    *field += by;
    pthread_mutex_unlock(&c->mu);
}

/* The entry name of tokens[0..n): the SHA-256 of their little-endian int32 bytes. */
static int entry_name(const int32_t *tokens, size_t n, char name[NAME_BYTES]) {
    Sha256 h;
    if (sha256_init(&h)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)tokens[i];
        unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
        sha256_update(&h, b, 4);
    }
    char hex[65];
    if (sha256_final(&h, hex)) return -1;
    snprintf(name, NAME_BYTES, "%s%s", hex, SUFFIX);
    return 0;
}

static int find(const PromptCache *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].name, name)) return i;
    return -1;
}

static Entry *add(PromptCache *c, const char *name, uint64_t bytes, struct timespec used) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->v = df_realloc(c->v, sizeof *c->v * (size_t)c->cap);
    }
    Entry *en = &c->v[c->n++];
    memset(en, 0, sizeof *en);
    snprintf(en->name, sizeof en->name, "%s", name);
    en->bytes = bytes, en->used = used;
    c->bytes += bytes;
    index_changed(c);
    return en;
}

/* Drops entry i from the index, and its file when unlink_it. */
static void drop(PromptCache *c, int i, int unlink_it) {
    if (unlink_it) {
        char *path = path_join(c->dir, c->v[i].name);
        if (unlink(path) != 0 && errno != ENOENT) say(c, "%s: cannot remove: %s", path, strerror(errno));
        free(path);
    }
    c->bytes -= c->v[i].bytes;
    tokids_free(&c->v[i].toks);
    c->v[i] = c->v[--c->n];
    index_changed(c);
}

static int is_ours(const char *path) {
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(magic, 1, 8, f) : 0;
    if (f) fclose(f);
    return n == 8 && !memcmp(magic, "DFSTATE\n", 8);
}

/* One file of the folder at open: an entry indexed (usable or stale), a damaged entry removed, a
 * temporary left by a writer that is gone removed, anything else left alone. */
static void scan_one(PromptCache *c, const char *name) {
    size_t len = strlen(name), sl = strlen(SUFFIX);
    const char *tmp = strstr(name, SUFFIX ".tmp.");
    char *path = path_join(c->dir, name);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) goto done;
    if (tmp) { /* name.dfstate.tmp.PID: removed once its writer has gone */
        long pid = strtol(tmp + sl + 5, NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH && is_ours(path)) unlink(path);
        goto done;
    }
    if (len != NAME_BYTES - 1 || strcmp(name + len - sl, SUFFIX)) goto done;
    StateFileReader r;
    int rc = statefile_open(&r, path, STATEFILE_PROMPT, &c->id, c->e->model, c->e->max_context, 0);
    if (rc == STATEFILE_OTHER) {
        add(c, name, (uint64_t)st.st_size, plat_mtime(&st))->stale = 1;
        goto done;
    }
    TokIds t = {0};
    char want[NAME_BYTES], *payload = NULL;
    size_t plen;
    if (rc == 0) {
        if (statefile_payload(&r, &payload, &plen, 0) || statefile_tokens(&r, &t) || entry_name(t.v, t.n, want)) rc = -1;
        else if (strcmp(want, name)) rc = df_fail("%s: its name is not its tokens' hash", path);
        statefile_close(&r);
        free(payload);
    }
    if (rc == 0) {
        add(c, name, (uint64_t)st.st_size, plat_mtime(&st))->toks = t;
        t = (TokIds){0};
    } else if (is_ours(path)) {
        say(c, "refused: %s; removed", df_errmsg());
        count(c, &c->counts.refused, 1);
        unlink(path);
    }
    tokids_free(&t);
done:
    free(path);
}

static int scan(PromptCache *c) {
    DIR *d = opendir(c->dir);
    if (!d) return df_fail("%s: cannot read the prompt cache folder: %s", c->dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') scan_one(c, de->d_name);
    closedir(d);
    return 0;
}

PromptCache *pcache_open(Engine *e, const PromptCacheOptions *o) {
    struct stat st;
    if (stat(o->dir, &st) != 0) {
        char *parent = df_strdup(o->dir), *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = 0, file_mkdirs(parent); /* mkdir below says why it failed */
        free(parent);
        if (mkdir(o->dir, 0700) != 0 && errno != EEXIST)
            return df_fail("%s: cannot create the prompt cache folder: %s", o->dir, strerror(errno)), NULL;
    } else if (!S_ISDIR(st.st_mode)) {
        return df_fail("%s: the prompt cache is not a folder", o->dir), NULL;
    }
    PromptCache *c = df_calloc(1, sizeof *c);
    c->e = e, c->o = *o;
    c->dir = df_strdup(o->dir);
    pthread_mutex_init(&c->mu, NULL);
    if (state_identity(e, &c->id) || scan(c)) {
        pcache_close(c);
        return NULL;
    }
    int stale = 0;
    uint64_t stale_bytes = 0;
    for (int i = 0; i < c->n; i++)
        if (c->v[i].stale) stale++, stale_bytes += c->v[i].bytes;
    if (stale)
        say(c, "%d entries of another model, settings or format (%.1f MB) are not used; they go first when room is needed",
            stale, stale_bytes / 1e6);
    return c;
}

void pcache_close(PromptCache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) tokids_free(&c->v[i].toks);
    free(c->v);
    free(c->dir);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The longest usable entry that is a strict prefix of prompt and longer than have, or -1. */
static int best(const PromptCache *c, const int32_t *prompt, size_t n, size_t have) {
    int b = -1;
    for (int i = 0; i < c->n; i++) {
        const TokIds *t = &c->v[i].toks;
        if (c->v[i].stale || t->n <= have || t->n >= n || (b >= 0 && t->n <= c->v[b].toks.n)) continue;
        if (!memcmp(t->v, prompt, t->n * sizeof *prompt)) b = i;
    }
    return b;
}

/* Entry i into s. Returns 0, or -1 with s reset and the entry dropped (its file removed when damaged). */
static int load(PromptCache *c, int i, Session *s) {
    char *path = path_join(c->dir, c->v[i].name);
    StateFileReader r;
    TokIds t = {0};
    char *payload = NULL;
    size_t plen;
    int rc = statefile_open(&r, path, STATEFILE_PROMPT, &c->id, c->e->model, c->e->max_context, 0);
    if (rc == 0) {
        rc = statefile_payload(&r, &payload, &plen, 0) || statefile_tokens(&r, &t) ? -1 : 0;
        if (!rc && (t.n != c->v[i].toks.n || memcmp(t.v, c->v[i].toks.v, t.n * sizeof *t.v)))
            rc = df_fail("%s: its tokens changed since the folder was read", path);
        if (!rc) rc = statefile_restore(&r, s, &t);
        statefile_close(&r);
    }
    free(payload);
    tokids_free(&t);
    if (rc) { /* a damaged entry of ours is removed; one gone or replaced meanwhile is only forgotten */
        session_reset(s);
        say(c, "refused: %s", df_errmsg());
        count(c, &c->counts.refused, 1);
        if (rc == STATEFILE_OTHER) c->v[i].stale = 1, tokids_free(&c->v[i].toks), index_changed(c);
        else drop(c, i, is_ours(path));
    } else if (utimensat(AT_FDCWD, path, NULL, 0) == 0) {
        clock_gettime(CLOCK_REALTIME, &c->v[i].used); /* least recently used goes first */
    }
    free(path);
    return rc ? -1 : 0;
}

size_t pcache_restore(PromptCache *c, Session *s, const int32_t *prompt, size_t n, size_t have) {
    for (int i; (i = best(c, prompt, n, have)) >= 0;) {
        size_t got = c->v[i].toks.n;
        if (load(c, i, s) == 0) {
            pthread_mutex_lock(&c->mu);
            c->counts.hits++, c->counts.tokens_restored += got;
            pthread_mutex_unlock(&c->mu);
            say(c, "restored %zu of the prompt's %zu tokens from %.12s", got, n, c->v[i].name);
            return got;
        }
        have = 0; /* s was reset: any entry now beats it */
    }
    count(c, &c->counts.misses, 1);
    return 0;
}

static int older(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec != b->tv_sec ? a->tv_sec < b->tv_sec : a->tv_nsec < b->tv_nsec;
}

/* Removes entries until `need` more bytes fit the bound: stale ones first, then the least
 * recently used. */
static void make_room(PromptCache *c, uint64_t need) {
    while (c->n && c->bytes + need > c->o.max_bytes) {
        int v = 0;
        for (int i = 1; i < c->n; i++)
            if (c->v[i].stale > c->v[v].stale || (c->v[i].stale == c->v[v].stale && older(&c->v[i].used, &c->v[v].used))) v = i;
        drop(c, v, 1);
    }
}

void pcache_store(PromptCache *c, const State *st, const int32_t *tokens, size_t n) {
    char name[NAME_BYTES];
    if (n < (size_t)c->o.min_tokens || entry_name(tokens, n, name)) return;
    int at = find(c, name);
    if (at >= 0 && !c->v[at].stale) return;
    if (at >= 0) drop(c, at, 1);
    uint64_t bytes = STATEFILE_HEADER_BYTES + 4ull * n + state_saved_bytes(c->e->model, (int)n) + 64;
    if (bytes > c->o.max_bytes) {
        if (!c->said_too_big)
            say(c, "a prompt's State of %.1f MB is larger than the bound of %.1f MB: not kept (raise DELTAFIN_PROMPT_CACHE_GB)",
                bytes / 1e6, c->o.max_bytes / 1e6);
        c->said_too_big = 1;
        return;
    }
    make_room(c, bytes);
    char *path = path_join(c->dir, name);
    StateFileContent content = {STATEFILE_PROMPT, tokens, n, -1, NULL, 0, st, c->e->model};
    if (statefile_write(path, &c->id, &content)) {
        say(c, "not kept: %s", df_errmsg());
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        Entry *en = add(c, name, bytes, now);
        tokids_reserve(&en->toks, n);
        memcpy(en->toks.v, tokens, n * sizeof *tokens);
        en->toks.n = n;
        count(c, &c->counts.stores, 1);
        say(c, "kept a prompt of %zu tokens as %.12s (%.1f MB)", n, name, bytes / 1e6);
    }
    free(path);
}

void pcache_counts(PromptCache *c, PromptCacheCounts *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->counts;
    pthread_mutex_unlock(&c->mu);
}

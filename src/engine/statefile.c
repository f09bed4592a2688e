/* statefile.c - a State and its tokens as one checked file (statefile.h). */
#include "engine/statefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "format/schema.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/le.h"

#define MAGIC "DFSTATE\n"
#define VERSION 1
#define SAMPLE_BYTES 4096

/* Field offsets in the header. */
enum { H_VERSION = 8, H_KIND = 12, H_MODEL = 16, H_MLA = 80, H_ALOG = 84, H_SPINE = 88, H_TOPK = 92, H_TOPK_FULL = 96,
       H_VOCAB = 100, H_DEVICE = 104, H_TOKENS = 168, H_PENDING = 172, H_PAYLOAD = 176, H_STATE = 184, H_END = 192 };
#define SUM_BYTES 64 /* the SHA-256 in hex */


/* ---- the identity ---- */

/* A whole small file of the model into the hash (its name first), or nothing when it is absent
 * and not required. */
static int hash_file(Sha256 *h, const char *dir, const char *name, int required) {
    char *path = path_join(dir, name), *buf;
    size_t len;
    struct stat st;
    int rc = 0;
    if (required || stat(path, &st) == 0) {
        if (file_read_all(path, 64u << 20, &buf, &len)) rc = -1;
        else sha256_update(h, name, strlen(name) + 1), sha256_update(h, buf, len), free(buf);
    }
    free(path);
    return rc;
}

/* Three pieces (start, middle, end) of a tensor's bytes, with its name and size. */
static int hash_samples(Sha256 *h, const Catalog *cat, const TensorInfo *t, int *fds) {
    if (fds[t->shard] < 0) {
        char *path = path_join(cat->dir, cat->shards[t->shard].file);
        fds[t->shard] = open(path, O_RDONLY | O_CLOEXEC);
        int err = errno;
        free(path);
        if (fds[t->shard] < 0) return df_fail("%s: cannot open: %s", cat->shards[t->shard].file, strerror(err));
    }
    uint64_t n = t->nbytes < SAMPLE_BYTES ? t->nbytes : SAMPLE_BYTES, at[3] = {0, (t->nbytes - n) / 2, t->nbytes - n};
    unsigned char buf[SAMPLE_BYTES];
    sha256_update(h, t->name, strlen(t->name) + 1);
    sha256_update(h, &t->nbytes, sizeof t->nbytes);
    for (int i = 0; i < 3; i++) {
        if (file_pread_full(fds[t->shard], buf, (size_t)n, t->offset + at[i], cat->shards[t->shard].file)) return -1;
        sha256_update(h, buf, (size_t)n);
    }
    return 0;
}

/* The routed experts are left out: a streaming install may not hold them yet, and the spine's
 * samples already differ between any two checkpoints that do not share their weights. */
static int model_fingerprint(const Catalog *cat, char out[65]) {
    Sha256 h;
    if (sha256_init(&h)) return -1;
    sha256_update(&h, "deltafin model id 1", 20);
    int rc = hash_file(&h, cat->dir, "config.json", 1) || hash_file(&h, cat->dir, "SHA256SUMS", 0) ? -1 : 0;
    int *fds = df_malloc(sizeof *fds * (size_t)cat->n_shards);
    for (int i = 0; i < cat->n_shards; i++) fds[i] = -1;
    for (int i = 0; i < cat->n_tensors && !rc; i++)
        if (!strstr(cat->tensors[i].name, ".experts.")) rc = hash_samples(&h, cat, &cat->tensors[i], fds);
    for (int i = 0; i < cat->n_shards; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    if (rc) return sha256_abort(&h), df_failctx("the model's fingerprint");
    return sha256_final(&h, out);
}

int state_identity(Engine *e, StateIdentity *id) {
    memset(id, 0, sizeof *id);
    if (!e->fingerprint[0] && model_fingerprint(&e->cat, e->fingerprint)) return -1;
    memcpy(id->model_id, e->fingerprint, 65);
    id->mla_cache = (uint32_t)e->opt.mla_cache, id->a_log = (uint32_t)e->opt.a_log;
    id->spine_int8 = (uint32_t)e->spine_int8, id->top_k = (uint32_t)e->cat.cfg.top_k;
    id->top_k_full = (uint32_t)e->top_k_full, id->vocab = (uint32_t)e->cat.cfg.vocab;
    MatDevice *dev = device_current();
    if (!dev) snprintf(id->device, sizeof id->device, "cpu");
    else
        snprintf(id->device, sizeof id->device, "%s%s%.40s", e->opt.device_pass == PASS_PRODUCTS ? "products " : "layers ",
                 dev->tensor_cores ? "tensor-cores " : "", dev->desc);
    return 0;
}

const char *state_identity_diff(const StateIdentity *f, const StateIdentity *me, char *buf, size_t len) {
    static const char *const mla[] = {"latent", "expanded"}, *const alog[] = {"per-head", "per-channel"};
    if (memcmp(f->model_id, me->model_id, 64))
        snprintf(buf, len, "another model (fingerprint %.12s..., this one is %.12s...)", f->model_id, me->model_id);
    else if (f->mla_cache != me->mla_cache)
        snprintf(buf, len, "K3_MLA_CACHE=%s, this session uses %s", f->mla_cache < 2 ? mla[f->mla_cache] : "?",
                 mla[me->mla_cache]);
    else if (f->a_log != me->a_log)
        snprintf(buf, len, "K3_A_LOG=%s, this session uses %s", f->a_log < 2 ? alog[f->a_log] : "?", alog[me->a_log]);
    else if (f->spine_int8 != me->spine_int8)
        snprintf(buf, len, "the %s spine, this session uses the %s one (K3_SPINE)", f->spine_int8 ? "int8" : "bf16",
                 me->spine_int8 ? "int8" : "bf16");
    else if (f->top_k != me->top_k || f->top_k_full != me->top_k_full || f->vocab != me->vocab)
        snprintf(buf, len, "%u experts per token (K3_MOE_TOP_K), this session uses %u", f->top_k, me->top_k);
    else if (strncmp(f->device, me->device, sizeof f->device))
        snprintf(buf, len, "the device '%.63s', this session uses '%.63s' (K3_DEV)", f->device, me->device);
    else return NULL;
    return buf;
}

/* ---- the header ---- */

static void header_write(unsigned char *b, const StateIdentity *id, const StateFileContent *c, uint64_t state_bytes) {
    memset(b, 0, STATEFILE_HEADER_BYTES);
    memcpy(b, MAGIC, 8);
    le_put32(b + H_VERSION, VERSION), le_put32(b + H_KIND, (uint32_t)c->kind);
    memcpy(b + H_MODEL, id->model_id, 64);
    le_put32(b + H_MLA, id->mla_cache), le_put32(b + H_ALOG, id->a_log), le_put32(b + H_SPINE, id->spine_int8);
    le_put32(b + H_TOPK, id->top_k), le_put32(b + H_TOPK_FULL, id->top_k_full), le_put32(b + H_VOCAB, id->vocab);
    memcpy(b + H_DEVICE, id->device, strnlen(id->device, sizeof id->device - 1));
    le_put32(b + H_TOKENS, (uint32_t)c->n), le_put32(b + H_PENDING, (uint32_t)c->pending);
    le_put64(b + H_PAYLOAD, c->payload_bytes), le_put64(b + H_STATE, state_bytes);
}

/* The header's fields into r; -1 when the reserved bytes are not zero or a text field is not one. */
static int header_read(const unsigned char *b, StateFileReader *r) {
    r->kind = (StateFileKind)le_get32(b + H_KIND);
    memcpy(r->id.model_id, b + H_MODEL, 64);
    r->id.model_id[64] = 0;
    r->id.mla_cache = le_get32(b + H_MLA), r->id.a_log = le_get32(b + H_ALOG), r->id.spine_int8 = le_get32(b + H_SPINE);
    r->id.top_k = le_get32(b + H_TOPK), r->id.top_k_full = le_get32(b + H_TOPK_FULL), r->id.vocab = le_get32(b + H_VOCAB);
    memcpy(r->id.device, b + H_DEVICE, sizeof r->id.device);
    r->n_tokens = le_get32(b + H_TOKENS), r->pending = (int32_t)le_get32(b + H_PENDING);
    r->payload_bytes = le_get64(b + H_PAYLOAD), r->state_bytes = le_get64(b + H_STATE);
    for (int i = H_END; i < STATEFILE_HEADER_BYTES; i++)
        if (b[i]) return -1;
    return r->id.device[sizeof r->id.device - 1] == 0 && is_hex_digest(r->id.model_id, 64) ? 0 : -1;
}

/* ---- writing ---- */

typedef struct {
    int fd;
    const char *path;
    Sha256 sha;
} Out;

static int out_put(void *ctx, const void *p, size_t n) {
    Out *o = ctx;
    sha256_update(&o->sha, p, n);
    return file_write_full(o->fd, p, n, o->path);
}

static int put_tokens(Out *o, const int32_t *v, size_t n) {
    unsigned char b[4096];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof b / 4 && i < n; k++, i++) le_put32(b + 4 * k, (uint32_t)v[i]);
        if (out_put(o, b, 4 * k)) return -1;
    }
    return 0;
}

/* An existing file may be replaced only when it is a state file. */
static int replaceable(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : df_fail("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return df_fail("%s exists and is not a regular file: not replaced", path);
    char magic[8] = {0};
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, magic, 8) : -1;
    if (fd >= 0) close(fd);
    if (n != 8 || memcmp(magic, MAGIC, 8)) return df_fail("%s exists and is not a deltafin state file: not replaced", path);
    return 0;
}

static int write_body(Out *o, const StateIdentity *id, const StateFileContent *c) {
    unsigned char head[STATEFILE_HEADER_BYTES];
    header_write(head, id, c, state_saved_bytes(c->m, (int)c->n));
    if (out_put(o, head, sizeof head) || (c->payload_bytes && out_put(o, c->payload, c->payload_bytes)) ||
        put_tokens(o, c->tokens, c->n) || state_save(c->st, out_put, o))
        return -1;
    char hex[65];
    if (sha256_final(&o->sha, hex)) return -1;
    return file_write_full(o->fd, hex, SUM_BYTES, o->path);
}

int statefile_write(const char *path, const StateIdentity *id, const StateFileContent *c) {
    if (state_length(c->st) != (int)c->n)
        return df_fail("%s: the State holds %d positions, not its %zu tokens", path, state_length(c->st), c->n);
    if (replaceable(path)) return -1;
    size_t len = strlen(path) + 32;
    char *tmp = df_malloc(len);
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid()); /* one writer per process: its own temporary */
    struct stat st;
    if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode)) unlink(tmp); /* left by an interrupted write of ours */
    Out o = {open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600), tmp, {0}};
    int rc = o.fd < 0 ? df_fail("%s: cannot create: %s", tmp, strerror(errno)) : sha256_init(&o.sha);
    if (o.fd >= 0) {
        if (!rc) rc = write_body(&o, id, c);
        if (o.sha.ctx) sha256_abort(&o.sha);
        if (!rc && fsync(o.fd) != 0) rc = df_fail("%s: fsync: %s", tmp, strerror(errno));
        if (close(o.fd) != 0 && !rc) rc = df_fail("%s: close: %s", tmp, strerror(errno));
        if (!rc && rename(tmp, path) != 0) rc = df_fail("%s: cannot rename into place: %s", path, strerror(errno));
        if (rc) unlink(tmp);
    }
    free(tmp);
    return rc;
}

/* ---- reading ---- */

static int in_get(void *ctx, void *p, size_t n) {
    StateFileReader *r = ctx;
    if (fread(p, 1, n, r->f) != n) return df_fail("%s: ends early", r->path);
    sha256_update(&r->sha, p, n);
    return 0;
}

/* The file's sum against what was hashed so far (everything before its last SUM_BYTES). */
static int sum_matches(StateFileReader *r) {
    char want[SUM_BYTES], got[65];
    if (fread(want, 1, SUM_BYTES, r->f) != SUM_BYTES) return df_fail("%s: ends early", r->path);
    if (sha256_final(&r->sha, got)) return -1;
    return memcmp(want, got, SUM_BYTES) ? df_fail("%s is damaged (its SHA-256 does not match its contents)", r->path) : 0;
}

/* The whole file hashed before anything in it is believed; the reader is left after the header. */
static int verify_whole(StateFileReader *r) {
    unsigned char buf[1 << 16];
    if (fseek(r->f, 0, SEEK_SET) || sha256_init(&r->sha)) return df_fail("%s: cannot seek", r->path);
    for (uint64_t left = r->size - SUM_BYTES; left;) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (in_get(r, buf, n)) return sha256_abort(&r->sha), -1;
        left -= n;
    }
    if (sum_matches(r)) return -1;
    unsigned char head[STATEFILE_HEADER_BYTES];
    return fseek(r->f, 0, SEEK_SET) || sha256_init(&r->sha) || in_get(r, head, sizeof head) ? -1 : 0;
}

/* Every header field against this engine and the file's size. */
static int check_header(StateFileReader *r, StateFileKind kind, const StateIdentity *id, const Model *m, int max_tokens) {
    static const char *const kinds[] = {"?", "chat file", "prompt cache entry"};
    char why[160];
    if (r->kind != kind)
        return df_fail("%s is a %s, not a %s", r->path, r->kind == STATEFILE_CHAT || r->kind == STATEFILE_PROMPT ? kinds[r->kind] : "state file of an unknown kind",
                       kinds[kind]);
    if (state_identity_diff(&r->id, id, why, sizeof why)) {
        df_fail("%s was written with %s", r->path, why);
        return STATEFILE_OTHER;
    }
    if (r->n_tokens > (uint32_t)max_tokens)
        return df_fail("%s holds %u tokens, more than this session's context limit %d (-c/--ctx-size)", r->path, r->n_tokens,
                       max_tokens);
    if (r->pending < -1 || r->pending >= (int32_t)id->vocab) return df_fail("%s: a token id out of range", r->path);
    uint64_t state_bytes = state_saved_bytes(m, (int)r->n_tokens);
    if (r->state_bytes != state_bytes)
        return df_fail("%s: %llu bytes of state for %u tokens, expected %llu", r->path, (unsigned long long)r->state_bytes,
                       r->n_tokens, (unsigned long long)state_bytes);
    uint64_t fixed = STATEFILE_HEADER_BYTES + 4ull * r->n_tokens + state_bytes + SUM_BYTES;
    if (r->payload_bytes > r->size || r->size - r->payload_bytes != fixed)
        return df_fail("%s: %llu bytes, its header describes %llu and a payload of %llu", r->path, (unsigned long long)r->size,
                       (unsigned long long)fixed, (unsigned long long)r->payload_bytes);
    return 0;
}

/* path opened without waiting on a FIFO's writer (O_NONBLOCK) and refused unless it is a
 * regular file. */
static FILE *open_regular(const char *path, uint64_t *size) {
    int fd = file_open_regular(path); /* a FIFO is refused, never waited on */
    if (fd < 0) return NULL;
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0) df_fail("%s: %s", path, strerror(errno));
    else if (!(f = fdopen(fd, "rb"))) df_fail("%s: %s", path, strerror(errno));
    if (!f) close(fd);
    else *size = (uint64_t)st.st_size;
    return f;
}

int statefile_open(StateFileReader *r, const char *path, StateFileKind kind, const StateIdentity *id, const Model *m,
                   int max_tokens, int verify) {
    memset(r, 0, sizeof *r);
    r->path = path;
    if (!(r->f = open_regular(path, &r->size))) return -1;
    unsigned char head[STATEFILE_HEADER_BYTES];
    int rc = 0;
    if (r->size < STATEFILE_HEADER_BYTES + SUM_BYTES) rc = df_fail("%s: too short to be a deltafin state file", path);
    else if (sha256_init(&r->sha) || in_get(r, head, sizeof head)) rc = -1;
    else if (memcmp(head, MAGIC, 8)) rc = df_fail("%s is not a deltafin state file", path);
    else if (le_get32(head + H_VERSION) != VERSION)
        rc = df_fail("%s: format version %u, this deltafin reads %u", path, le_get32(head + H_VERSION), VERSION),
        rc = STATEFILE_OTHER;
    else if (header_read(head, r)) rc = df_fail("%s: a damaged header", path);
    else rc = check_header(r, kind, id, m, max_tokens);
    if (!rc && verify) rc = verify_whole(r);
    if (rc) statefile_close(r);
    return rc;
}

int statefile_payload(StateFileReader *r, char **out, size_t *n, size_t max) {
    *out = NULL, *n = 0;
    if (r->payload_bytes > max)
        return df_fail("%s: a payload of %llu bytes (at most %zu)", r->path, (unsigned long long)r->payload_bytes, max);
    char *p = df_malloc((size_t)r->payload_bytes + 1);
    if (in_get(r, p, (size_t)r->payload_bytes)) return free(p), -1;
    p[r->payload_bytes] = 0;
    *out = p, *n = (size_t)r->payload_bytes;
    return 0;
}

int statefile_tokens(StateFileReader *r, TokIds *t) {
    unsigned char b[4096];
    t->n = 0;
    tokids_reserve(t, r->n_tokens);
    for (uint32_t i = 0; i < r->n_tokens;) {
        uint32_t k = r->n_tokens - i < sizeof b / 4 ? r->n_tokens - i : (uint32_t)(sizeof b / 4);
        if (in_get(r, b, 4 * (size_t)k)) return -1;
        for (uint32_t j = 0; j < k; j++, i++) {
            int32_t v = (int32_t)le_get32(b + 4 * j);
            if (v < 0 || (uint32_t)v >= r->id.vocab) return df_fail("%s: token id %d out of range", r->path, v);
            tokids_push(t, v);
        }
    }
    return 0;
}

int statefile_restore(StateFileReader *r, Session *s, const TokIds *t) {
    if (t->n != r->n_tokens) return df_fail("%s: read its tokens first", r->path);
    if (session_restore(s, t->v, t->n, r->pending, in_get, r) || sum_matches(r)) {
        session_reset(s);
        return df_failctx("%s", r->path);
    }
    return 0;
}

void statefile_close(StateFileReader *r) {
    if (r->sha.ctx) sha256_abort(&r->sha);
    if (r->f) fclose(r->f);
    r->f = NULL;
}

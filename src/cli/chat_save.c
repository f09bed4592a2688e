/* chat_save.c - a conversation and its model state in one file (/save, /load, chat --load), so a
 * long session resumes without reading its history again.
 *
 * Layout (integers little-endian):
 *   the header (HEADER_BYTES): magic "DFCHAT1\n", version, the model's fingerprint (64 hex
 *     digits: chat_model_id below), what changes the numbers (MLA cache layout, A_log indexing,
 *     spine format, experts per token and the model's own count, vocabulary size), the counts of
 *     the token lists, the picked-but-unfed token, the turn count, and the byte counts of the JSON
 *     and of the state;
 *   the conversation as JSON ({"messages": [...], "system": ...});
 *   the held tokens, the closing tail of the last answer, an unanswered prompt (int32 each);
 *   the settled State (state_save);
 *   the SHA-256 of everything before it (32 bytes).
 * /load checks all of it against this session before anything changes: a file of another model or
 * of other numerics settings is refused with a message saying which; a damaged one by its sum. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/chat.h"
#include "engine/statefile.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/le.h"

#define MAGIC "DFCHAT1\n"
#define VERSION 1
#define HEADER_BYTES 160
#define MAX_JSON_BYTES (256u << 20)
#define MAX_TURNS (1 << 24) /* far beyond any context; keeps the turn counter's arithmetic in range */

typedef struct {
    uint32_t version, mla_cache, a_log, spine_int8, top_k, top_k_full, vocab;
    uint32_t n_held, n_tail, n_unanswered, turn;
    int32_t pending;
    uint64_t json_bytes, state_bytes;
    char model_id[65];
} Header;

/* ---- SHA-256 (libcrypto) ---- */

typedef struct {
    EVP_MD_CTX *md;
} Sha;

static void sha_init(Sha *h) {
    h->md = EVP_MD_CTX_new();
    if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) abort(); /* out of memory */
}

static void sha_add(Sha *h, const void *p, size_t n) {
    if (n && EVP_DigestUpdate(h->md, p, n) != 1) abort();
}

static void sha_end(Sha *h, unsigned char out[32]) {
    unsigned int n = 32;
    if (EVP_DigestFinal_ex(h->md, out, &n) != 1) abort();
    EVP_MD_CTX_free(h->md);
    h->md = NULL;
}

/* ---- the model's fingerprint ---- */

/* The weights' fingerprint (statefile.h: what the prompt cache's files carry too), once. */
static int chat_model_id(Chat *c) {
    if (c->model_id[0]) return 0;
    StateIdentity id;
    if (state_identity(c->e, &id)) return -1;
    memcpy(c->model_id, id.model_id, sizeof c->model_id);
    return 0;
}

/* ---- the header ---- */


/* Field offsets after the magic. */
enum { H_VERSION = 8, H_MODEL = 12, H_MLA = 76, H_ALOG = 80, H_SPINE = 84, H_TOPK = 88, H_TOPK_FULL = 92,
       H_VOCAB = 96, H_HELD = 100, H_PENDING = 104, H_TAIL = 108, H_UNANSWERED = 112, H_TURN = 116, H_JSON = 120,
       H_STATE = 128 };

static void header_write(unsigned char *b, const Header *h) {
    memset(b, 0, HEADER_BYTES);
    memcpy(b, MAGIC, 8);
    le_put32(b + H_VERSION, h->version);
    memcpy(b + H_MODEL, h->model_id, 64);
    le_put32(b + H_MLA, h->mla_cache), le_put32(b + H_ALOG, h->a_log), le_put32(b + H_SPINE, h->spine_int8);
    le_put32(b + H_TOPK, h->top_k), le_put32(b + H_TOPK_FULL, h->top_k_full), le_put32(b + H_VOCAB, h->vocab);
    le_put32(b + H_HELD, h->n_held), le_put32(b + H_PENDING, (uint32_t)h->pending), le_put32(b + H_TAIL, h->n_tail);
    le_put32(b + H_UNANSWERED, h->n_unanswered), le_put32(b + H_TURN, h->turn);
    le_put64(b + H_JSON, h->json_bytes), le_put64(b + H_STATE, h->state_bytes);
}

static void header_read(const unsigned char *b, Header *h) {
    h->version = le_get32(b + H_VERSION);
    memcpy(h->model_id, b + H_MODEL, 64);
    h->model_id[64] = 0;
    h->mla_cache = le_get32(b + H_MLA), h->a_log = le_get32(b + H_ALOG), h->spine_int8 = le_get32(b + H_SPINE);
    h->top_k = le_get32(b + H_TOPK), h->top_k_full = le_get32(b + H_TOPK_FULL), h->vocab = le_get32(b + H_VOCAB);
    h->n_held = le_get32(b + H_HELD), h->pending = (int32_t)le_get32(b + H_PENDING), h->n_tail = le_get32(b + H_TAIL);
    h->n_unanswered = le_get32(b + H_UNANSWERED), h->turn = le_get32(b + H_TURN);
    h->json_bytes = le_get64(b + H_JSON), h->state_bytes = le_get64(b + H_STATE);
}

/* This session's header (counts filled by the caller). */
static void header_of(const Chat *c, Header *h) {
    memset(h, 0, sizeof *h);
    h->version = VERSION;
    memcpy(h->model_id, c->model_id, 65);
    EngineInfo e;
    engine_info(c->e, &e);
    h->mla_cache = (uint32_t)e.mla_cache, h->a_log = (uint32_t)e.a_log;
    h->spine_int8 = (uint32_t)e.spine_int8, h->top_k = (uint32_t)e.top_k;
    h->top_k_full = (uint32_t)e.top_k_full, h->vocab = (uint32_t)e.vocab;
}

/* ---- writing ---- */

typedef struct {
    int fd;
    const char *path;
    Sha sha;
} Out;

static int out_put(void *ctx, const void *p, size_t n) {
    Out *o = ctx;
    sha_add(&o->sha, p, n);
    return file_write_full(o->fd, p, n, o->path);
}

static int put_tokens(Out *o, const int32_t *v, size_t n) {
    unsigned char b[4];
    for (size_t i = 0; i < n; i++) {
        le_put32(b, (uint32_t)v[i]);
        if (out_put(o, b, 4)) return -1;
    }
    return 0;
}

/* An existing file may be replaced only when it is one of ours. */
static int replaceable(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : df_fail("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return df_fail("%s exists and is not a regular file: not replaced", path);
    char magic[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, magic, 8) : -1;
    if (fd >= 0) close(fd);
    if (n != 8 || memcmp(magic, MAGIC, 8)) return df_fail("%s exists and is not a deltafin chat file: not replaced", path);
    return 0;
}

static char *conversation_json(const Chat *c, size_t *len) {
    json_t *j = json_pack("{s:O, s:s?}", "messages", c->msgs, "system", c->system);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) abort(); /* out of memory */
    *len = strlen(text);
    return text;
}

static int write_body(Chat *c, Out *o) {
    size_t json_len;
    char *json = conversation_json(c, &json_len);
    Header h;
    header_of(c, &h);
    h.n_held = (uint32_t)c->s.held.n, h.pending = session_pending(&c->s), h.n_tail = (uint32_t)c->tail.n;
    h.n_unanswered = (uint32_t)c->unanswered.n, h.turn = (uint32_t)c->turn;
    h.json_bytes = json_len, h.state_bytes = state_saved_bytes(engine_model(c->e), (int)c->s.held.n);
    unsigned char head[HEADER_BYTES];
    header_write(head, &h);
    int rc = out_put(o, head, sizeof head) || out_put(o, json, json_len) || put_tokens(o, c->s.held.v, c->s.held.n) ||
                     put_tokens(o, c->tail.v, c->tail.n) || put_tokens(o, c->unanswered.v, c->unanswered.n) ||
                     state_save(c->s.st, out_put, o)
                 ? -1
                 : 0;
    free(json);
    if (rc) return -1;
    unsigned char sum[32];
    sha_end(&o->sha, sum);
    return file_write_full(o->fd, sum, sizeof sum, o->path);
}

int chat_save(Chat *c, const char *path) {
    if (chat_model_id(c) || replaceable(path)) return -1;
    session_settle(&c->s); /* the State holds exactly the held tokens */
    size_t len = strlen(path) + 8;
    char *tmp = df_malloc(len);
    snprintf(tmp, len, "%s.tmp", path);
    struct stat st;
    if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode)) unlink(tmp); /* left by an interrupted save */
    Out o = {open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600), tmp, {0}};
    int rc = o.fd < 0 ? df_fail("%s: cannot create: %s", tmp, strerror(errno)) : 0;
    if (!rc) {
        sha_init(&o.sha);
        rc = write_body(c, &o);
        if (o.sha.md) EVP_MD_CTX_free(o.sha.md);
        if (!rc && fsync(o.fd) != 0) rc = df_fail("%s: fsync: %s", tmp, strerror(errno));
        if (close(o.fd) != 0 && !rc) rc = df_fail("%s: close: %s", tmp, strerror(errno));
        if (!rc && rename(tmp, path) != 0) rc = df_fail("%s: cannot rename into place: %s", path, strerror(errno));
        if (rc) unlink(tmp);
    }
    free(tmp);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    FILE *f;
    const char *path;
} In;

static int in_get(void *ctx, void *p, size_t n) {
    In *in = ctx;
    return fread(p, 1, n, in->f) == n ? 0 : df_fail("%s: ends early", in->path);
}

/* The whole file's sum against its last 32 bytes, before anything is believed. */
static int check_sum(FILE *f, const char *path, uint64_t size) {
    Sha h;
    sha_init(&h);
    unsigned char buf[1 << 16], want[32], got[32];
    uint64_t left = size - 32;
    while (left) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (fread(buf, 1, n, f) != n) {
            sha_end(&h, got);
            return df_fail("%s: read failed", path);
        }
        sha_add(&h, buf, n);
        left -= n;
    }
    sha_end(&h, got);
    if (fread(want, 1, 32, f) != 32 || memcmp(want, got, 32))
        return df_fail("%s is damaged (its SHA-256 does not match its contents)", path);
    return fseek(f, 0, SEEK_SET) ? df_fail("%s: cannot seek", path) : 0;
}

/* Every field against this session. */
static int check_header(Chat *c, const Header *h, const char *path, uint64_t size) {
    Header me;
    header_of(c, &me);
    static const char *const mla[] = {"latent", "expanded"}, *const alog[] = {"per-head", "per-channel"};
    if (h->version != VERSION) return df_fail("%s: format version %u, this deltafin reads %u", path, h->version, VERSION);
    if (memcmp(h->model_id, me.model_id, 64))
        return df_fail("%s was saved with another model (fingerprint %.12s..., this one is %.12s...)", path, h->model_id,
                       me.model_id);
    if (h->mla_cache != me.mla_cache)
        return df_fail("%s was saved with DELTAFIN_MLA_CACHE=%s, this session uses %s", path, h->mla_cache < 2 ? mla[h->mla_cache] : "?",
                       mla[me.mla_cache]);
    if (h->a_log != me.a_log)
        return df_fail("%s was saved with DELTAFIN_A_LOG=%s, this session uses %s", path, h->a_log < 2 ? alog[h->a_log] : "?",
                       alog[me.a_log]);
    if (h->spine_int8 != me.spine_int8)
        return df_fail("%s was saved with the %s spine, this session uses the %s one (DELTAFIN_SPINE)", path,
                       h->spine_int8 ? "int8" : "bf16", me.spine_int8 ? "int8" : "bf16");
    if (h->top_k != me.top_k || h->top_k_full != me.top_k_full || h->vocab != me.vocab)
        return df_fail("%s was saved with %u experts per token (DELTAFIN_MOE_TOP_K), this session uses %u", path, h->top_k,
                       me.top_k);
    EngineInfo e;
    engine_info(c->e, &e);
    uint32_t ctx = (uint32_t)e.max_context;
    if (h->n_held > ctx || h->n_tail > ctx || h->n_unanswered > ctx)
        return df_fail("%s holds %u tokens, more than this session's context limit %u (-c/--ctx-size)", path, h->n_held, ctx);
    if (h->pending < -1 || h->pending >= (int32_t)me.vocab) return df_fail("%s: a token id out of range", path);
    if (h->turn > MAX_TURNS) return df_fail("%s: a turn count of %u is out of range (at most %d)", path, h->turn, MAX_TURNS);
    if (h->json_bytes > MAX_JSON_BYTES) return df_fail("%s: a conversation of %llu bytes", path, (unsigned long long)h->json_bytes);
    if (h->state_bytes != state_saved_bytes(engine_model(c->e), (int)h->n_held))
        return df_fail("%s: %llu bytes of state for %u tokens, expected %llu", path, (unsigned long long)h->state_bytes,
                       h->n_held, (unsigned long long)state_saved_bytes(engine_model(c->e), (int)h->n_held));
    uint64_t want = HEADER_BYTES + h->json_bytes + 4ull * (h->n_held + h->n_tail + h->n_unanswered) + h->state_bytes + 32;
    if (size != want) return df_fail("%s: %llu bytes, its header describes %llu", path, (unsigned long long)size,
                                     (unsigned long long)want);
    return 0;
}

static int read_tokens(In *in, TokIds *t, uint32_t n, int vocab) {
    unsigned char b[4];
    t->n = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (in_get(in, b, 4)) return -1;
        int32_t v = (int32_t)le_get32(b);
        if (v < 0 || v >= vocab) return df_fail("%s: token id %d out of range", in->path, v);
        tokids_push(t, v);
    }
    return 0;
}

/* An assistant message's tool calls as chat keeps them: [{"id", "type": "function", "function":
 * {"name", "arguments"}}], all strings. */
static int valid_calls(const json_t *calls) {
    size_t i;
    const json_t *call;
    if (!json_is_array(calls)) return 0;
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        if (!json_is_string(json_object_get(call, "id")) || !json_is_string(json_object_get(call, "type")) ||
            !json_is_string(json_object_get(fn, "name")) || !json_is_string(json_object_get(fn, "arguments")))
            return 0;
    }
    return 1;
}

/* {"messages": [{"role": "system"|"user"|"assistant", "content": "...", "reasoning_content": "...",
 * "tool_calls": [...]}], "system": ...} */
static json_t *parse_conversation(const char *text, size_t n, const char *path, const char **system) {
    json_error_t e;
    json_t *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &e), *msgs = json_object_get(j, "messages"), *m;
    size_t i;
    if (!j) return df_fail("%s: the conversation is not valid JSON: %s (at byte %d of it)", path, e.text, e.position), NULL;
    if (!json_is_array(msgs)) return json_decref(j), df_fail("%s: the conversation is not a messages array", path), NULL;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *rc = json_object_get(m, "reasoning_content"), *calls = json_object_get(m, "tool_calls");
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) ||
            !json_is_string(json_object_get(m, "content")) || (rc && !json_is_string(rc)) ||
            (calls && (strcmp(role, "assistant") || !valid_calls(calls))))
            return json_decref(j), df_fail("%s: message %zu is not a chat message", path, i), NULL;
    }
    json_t *sys = json_object_get(j, "system");
    if (sys && !json_is_null(sys) && !json_is_string(sys))
        return json_decref(j), df_fail("%s: the system message is not text", path), NULL;
    *system = json_string_value(sys);
    return j;
}

typedef struct {
    json_t *conv;
    TokIds held, tail, unanswered;
} Loaded;

static void loaded_free(Loaded *l) {
    json_decref(l->conv);
    tokids_free(&l->held), tokids_free(&l->tail), tokids_free(&l->unanswered);
}

/* The file to load, opened without waiting on a FIFO's writer (O_NONBLOCK) and refused unless it
 * is a regular file; *st its status. NULL with a message. */
static FILE *open_regular(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return df_fail("%s: cannot open: %s", path, strerror(errno)), NULL;
    int flags = fcntl(fd, F_GETFL);
    FILE *f = NULL;
    if (fstat(fd, st) != 0) df_fail("%s: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode)) df_fail("%s is not a regular file (a chat file is one that /save wrote)", path);
    else if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) df_fail("%s: %s", path, strerror(errno));
    else if (!(f = fdopen(fd, "rb"))) df_fail("%s: %s", path, strerror(errno));
    if (!f) close(fd);
    return f;
}

int chat_load_stream(Chat *c, FILE *f, uint64_t size, const char *path) {
    if (chat_model_id(c)) return -1;
    unsigned char head[HEADER_BYTES];
    Header h;
    Loaded l = {0};
    In in = {f, path};
    const char *system = NULL;
    int rc = size < HEADER_BYTES + 32                       ? df_fail("%s: too short to be a chat file", path)
             : fread(head, 1, sizeof head, f) != sizeof head ? df_fail("%s: read failed", path)
             : memcmp(head, MAGIC, 8)                      ? df_fail("%s is not a deltafin chat file", path)
                                                           : 0;
    if (!rc) header_read(head, &h);
    if (!rc) rc = check_header(c, &h, path, size);
    if (!rc) rc = fseek(f, 0, SEEK_SET) || check_sum(f, path, size) || fseek(f, HEADER_BYTES, SEEK_SET) ? -1 : 0;
    char *json = NULL;
    if (!rc) {
        json = df_malloc(h.json_bytes + 1);
        rc = in_get(&in, json, h.json_bytes);
    }
    if (!rc && !(l.conv = parse_conversation(json, h.json_bytes, path, &system))) rc = -1;
    free(json);
    EngineInfo e;
    engine_info(c->e, &e);
    const int V = e.vocab;
    if (!rc) rc = read_tokens(&in, &l.held, h.n_held, V) || read_tokens(&in, &l.tail, h.n_tail, V) ||
                          read_tokens(&in, &l.unanswered, h.n_unanswered, V)
                      ? -1
                      : 0;
    if (!rc && session_restore(&c->s, l.held.v, l.held.n, h.pending, in_get, &in)) {
        df_failctx("%s (the conversation starts over)", path);
        rc = -2; /* the session was reset: so is the conversation */
    }
    if (rc == -2) {
        json_array_clear(c->msgs);
        c->tail.n = c->unanswered.n = 0;
        c->turn = 0;
    } else if (!rc) {
        json_decref(c->msgs);
        c->msgs = json_incref(json_object_get(l.conv, "messages"));
        free(c->system_copy);
        c->system = c->system_copy = system ? df_strdup(system) : NULL;
        TokIds t = c->tail, u = c->unanswered;
        c->tail = l.tail, c->unanswered = l.unanswered;
        l.tail = t, l.unanswered = u;
        c->turn = (int)h.turn;
    }
    loaded_free(&l);
    return rc ? -1 : 0;
}

int chat_load(Chat *c, const char *path) {
    struct stat st;
    FILE *f = open_regular(path, &st);
    if (!f) return -1;
    int rc = chat_load_stream(c, f, (uint64_t)st.st_size, path);
    fclose(f);
    return rc;
}

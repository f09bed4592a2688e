#include "fetch/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fetch/response.h"
#include "util/clock.h"
#include "util/err.h"

enum { MODE_RANGE, MODE_WHOLE };

#define URLCACHE_MAX 4096
#define URLCACHE_TTL_S 600.0

typedef struct {
    char *file, *url;
    char etag[RESP_TAG_MAX]; /* the ETag the redirect target answered with when it was cached */
    double t;
} UrlEntry;

struct UrlCache {
    pthread_mutex_t mu;
    UrlEntry e[URLCACHE_MAX];
    int n;
};

UrlCache *urlcache_new(void) {
    UrlCache *uc = df_calloc(1, sizeof *uc);
    pthread_mutex_init(&uc->mu, NULL);
    return uc;
}

void urlcache_free(UrlCache *uc) {
    if (!uc) return;
    for (int i = 0; i < uc->n; i++) free(uc->e[i].file), free(uc->e[i].url);
    pthread_mutex_destroy(&uc->mu);
    free(uc);
}

static int urlcache_find(UrlCache *uc, const char *file) {
    for (int i = 0; i < uc->n; i++)
        if (!strcmp(uc->e[i].file, file)) return i;
    return -1;
}

/* A fresh cached URL for file (new string) or NULL, and the ETag it answered with. */
static char *urlcache_get(UrlCache *uc, const char *file, char etag[RESP_TAG_MAX]) {
    if (!uc) return NULL;
    pthread_mutex_lock(&uc->mu);
    int i = urlcache_find(uc, file);
    char *url = i >= 0 && df_now() - uc->e[i].t < URLCACHE_TTL_S ? df_strdup(uc->e[i].url) : NULL;
    if (url) memcpy(etag, uc->e[i].etag, RESP_TAG_MAX);
    pthread_mutex_unlock(&uc->mu);
    return url;
}

static void urlcache_put(UrlCache *uc, const char *file, const char *url, const char *etag) {
    if (!uc) return;
    pthread_mutex_lock(&uc->mu);
    int i = urlcache_find(uc, file);
    if (i < 0 && uc->n < URLCACHE_MAX) i = uc->n++, uc->e[i].file = df_strdup(file), uc->e[i].url = NULL;
    if (i >= 0) {
        free(uc->e[i].url);
        uc->e[i].url = df_strdup(url), uc->e[i].t = df_now();
        snprintf(uc->e[i].etag, RESP_TAG_MAX, "%s", etag);
    }
    pthread_mutex_unlock(&uc->mu);
}

static void urlcache_drop(UrlCache *uc, const char *file) {
    if (!uc) return;
    pthread_mutex_lock(&uc->mu);
    int i = urlcache_find(uc, file);
    if (i >= 0) uc->e[i].t = -URLCACHE_TTL_S;
    pthread_mutex_unlock(&uc->mu);
}

/* Length of "scheme://authority/" of url (0 if malformed). */
static size_t origin_len(const char *url) {
    const char *p = strstr(url, "://");
    if (!p) return 0;
    const char *slash = strchr(p + 3, '/');
    return slash ? (size_t)(slash - url) + 1 : 0;
}

static int same_origin(const char *a, const char *b) {
    size_t n = origin_len(a);
    return n && n == origin_len(b) && !strncasecmp(a, b, n);
}

struct Conn {
    CURL *h;
    const Source *src;
    UrlCache *cache;
    int used_cache;          /* the last request went to a cached URL */
    char cached_etag[RESP_TAG_MAX];
    struct curl_slist *hdrs;
    _Atomic uint64_t *counter;
    _Atomic uint64_t *progress; /* bytes of the current range written so far, over its attempts */
    Response resp;           /* the response chain being received */
    /* the request */
    int mode, fd, checked;
    const RemoteInfo *expect;
    uint8_t *mem;
    char *buf;
    size_t buf_len, max;
    uint64_t off, len, got;
    char err[400];
    int err_transient;
};

/* Some server of the source has answered in this process: a refused connection after that is a
 * mirror restarting (worth retrying), before it a wrong address (fail at once). */
static _Atomic int source_answered;

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    Conn *c = ud;
    size_t n = size * nitems;
    resp_header(&c->resp, line, n);
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) atomic_store(&source_answered, 1);
    return n;
}

static size_t fail_write(Conn *c, int transient, const char *fmt, ...) DF_PRINTF(3, 4);
static size_t fail_write(Conn *c, int transient, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    c->err_transient = transient;
    return 0; /* aborts the transfer */
}

/* The expectation a response is checked against: through a cached redirect target the identity
 * is that target's own ETag (the hub's X-Linked-ETag is not repeated there). */
static void effective_expect(const Conn *c, RemoteInfo *e) {
    *e = *c->expect;
    if (c->used_cache) snprintf(e->identity, sizeof e->identity, "%s", c->cached_etag);
}

/* The first body bytes of a range response: is this exactly what was asked for? */
static size_t check_range_response(Conn *c) {
    RemoteInfo e;
    if (c->expect) effective_expect(c, &e);
    int transient;
    if (resp_check_range(&c->resp, c->off, c->len, c->expect ? &e : NULL, c->err, sizeof c->err, &transient)) {
        c->err_transient = transient;
        return 0;
    }
    c->checked = 1;
    return 1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    Conn *c = ud;
    size_t n = size * nmemb;
    if (c->mode == MODE_WHOLE) {
        if (c->resp.status != 200)
            return fail_write(c, resp_status_transient(c->resp.status), "HTTP %ld%s", c->resp.status,
                              resp_status_hint(c->resp.status));
        if (c->buf_len + n > c->max) return fail_write(c, 0, "larger than the %zu bytes allowed", c->max);
        memcpy(c->buf + c->buf_len, data, n);
        c->buf_len += n;
    } else {
        if (!c->checked && !check_range_response(c)) return 0;
        if (c->got + n > c->len) return fail_write(c, 1, "server sent more than the %llu bytes asked for", (unsigned long long)c->len);
        if (c->mem) memcpy(c->mem + c->got, data, n);
        else
            for (size_t done = 0; done < n;) {
                ssize_t w = pwrite(c->fd, data + done, n - done, (off_t)(c->off + c->got + done));
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) return fail_write(c, 0, "write failed: %s", w < 0 ? strerror(errno) : "no progress");
                done += (size_t)w;
            }
        c->got += n;
    }
    if (c->counter) atomic_fetch_add(c->counter, n);
    if (c->progress && c->mode == MODE_RANGE) atomic_fetch_add(c->progress, n);
    return n;
}

static int curl_ready; /* curl_global_init succeeded (set once, under pthread_once) */

static void curl_init_once(void) { curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == 0; }

Conn *conn_new(const Source *src, UrlCache *cache) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, curl_init_once);
    if (!curl_ready) return df_fail("libcurl: global initialisation failed"), NULL;
    Conn *c = df_calloc(1, sizeof *c);
    c->src = src, c->cache = cache;
    c->h = curl_easy_init();
    if (!c->h) return free(c), df_fail("libcurl: cannot create a handle"), NULL;
    if (*src->auth) c->hdrs = curl_slist_append(NULL, src->auth);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(c->h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c->h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c->h, CURLOPT_REDIR_PROTOCOLS_STR, strncmp(src->base, "http:", 5) ? "https" : "http,https");
    curl_easy_setopt(c->h, CURLOPT_USERAGENT, "deltafin/1");
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT, (long)src->connect_timeout_s);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_TIME, (long)src->stall_timeout_s);
    curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->h, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_TCP_KEEPALIVE, 1L);
    /* large receive buffer: fewer, larger pwrites into the shard */
    curl_easy_setopt(c->h, CURLOPT_BUFFERSIZE, 1L << 20);
    return c;
}

void conn_free(Conn *c) {
    if (!c) return;
    curl_easy_cleanup(c->h);
    curl_slist_free_all(c->hdrs);
    free(c);
}

void conn_set_counter(Conn *c, _Atomic uint64_t *counter) { c->counter = counter; }
void conn_set_progress(Conn *c, _Atomic uint64_t *progress) { c->progress = progress; }

/* Whether a libcurl failure may go away by itself. A name that does not resolve, a refused
 * connection before any server of the source answered, a bad URL or certificate will not. */
static int curl_transient(CURLcode res) {
    switch (res) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CONNECT_ERROR:
        return 0;
    case CURLE_COULDNT_CONNECT:
        return atomic_load(&source_answered);
    default:
        return 1;
    }
}

static const char *curl_hint(CURLcode res) {
    if (res == CURLE_COULDNT_RESOLVE_HOST) return " (check K3_HF_HOST and the network)";
    if (res == CURLE_COULDNT_CONNECT && !atomic_load(&source_answered)) return " (is the mirror running? check K3_HF_HOST)";
    return "";
}

/* One request to url (the file's resolve URL, a cached redirect target, or an API URL). */
static int perform_url(Conn *c, const char *label, const char *url, const char *resolve, int *transient) {
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    /* the token is for the hub: a cached URL on another host (the CDN) does not get it */
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, same_origin(url, resolve) ? c->hdrs : NULL);
    resp_begin(&c->resp);
    c->checked = 0, c->got = 0, c->err[0] = 0;
    CURLcode res = curl_easy_perform(c->h);
    long code = 0;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
    if (code) c->resp.status = code;
    if (*c->err) {
        *transient = c->err_transient;
        return df_fail("%s: %s", label, c->err);
    }
    if (res != CURLE_OK) {
        *transient = curl_transient(res);
        return df_fail("%s: %s%s", label, curl_easy_strerror(res), curl_hint(res));
    }
    return 0;
}

static int perform(Conn *c, const char *file, int *transient) {
    char *resolve = source_url(c->src, file);
    char *cached = c->mode == MODE_RANGE ? urlcache_get(c->cache, file, c->cached_etag) : NULL;
    c->used_cache = cached != NULL;
    size_t ln = strlen(c->src->display) + strlen(file) + 1;
    char *label = df_malloc(ln);
    snprintf(label, ln, "%s%s", c->src->display, file);
    int rc = perform_url(c, label, cached ? cached : resolve, resolve, transient);
    char *effective = NULL;
    if (!rc && !cached && c->mode == MODE_RANGE && c->resp.status == 206 && c->resp.n_status > 1 &&
        curl_easy_getinfo(c->h, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK && effective && strcmp(effective, resolve))
        urlcache_put(c->cache, file, effective, c->resp.etag);
    free(resolve), free(cached), free(label);
    return rc;
}

int http_range(Conn *c, const char *file, uint64_t off, uint64_t len, const RemoteInfo *expect, int fd, uint8_t *mem,
               RemoteInfo *info, int *transient) {
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off, (unsigned long long)(off + len - 1));
    c->mode = MODE_RANGE, c->fd = fd, c->mem = mem, c->off = off, c->len = len, c->expect = expect;
    curl_easy_setopt(c->h, CURLOPT_RANGE, range);
    curl_easy_setopt(c->h, CURLOPT_NOBODY, 0L);
    *transient = 0;
    if (perform(c, file, transient)) return -1;
    if (!c->checked && c->len && !check_range_response(c)) { /* no body at all: the status says why */
        *transient = c->err_transient;
        return df_fail("%s%s: %s", c->src->display, file, c->err);
    }
    if (c->got != len) {
        *transient = 1;
        return df_fail("%s%s: bytes %s: received %llu of %llu bytes", c->src->display, file, range,
                       (unsigned long long)c->got, (unsigned long long)len);
    }
    if (info) resp_info(&c->resp, info);
    return 0;
}

/* A whole document into c->buf; the status must be 200. */
static int get_whole(Conn *c, const char *file, const char *api_url, size_t max, int *missing, int *transient) {
    c->mode = MODE_WHOLE, c->max = max, c->buf_len = 0, c->buf = df_malloc(max + 1), c->expect = NULL;
    curl_easy_setopt(c->h, CURLOPT_RANGE, NULL);
    *missing = 0, *transient = 0;
    int rc;
    if (api_url) {
        char *resolve = source_url(c->src, "x");
        c->used_cache = 0;
        rc = perform_url(c, api_url, api_url, resolve, transient);
        free(resolve);
    } else {
        rc = perform(c, file, transient);
    }
    const char *label = api_url ? api_url : file;
    *missing = c->resp.status == 404;
    if (!rc && c->resp.status != 200) {
        *transient = resp_status_transient(c->resp.status);
        rc = df_fail("%s%s: HTTP %ld%s", api_url ? "" : c->src->display, label, c->resp.status,
                     resp_status_hint(c->resp.status));
    }
    if (!rc && c->resp.have_length && c->resp.length != c->buf_len) {
        *transient = 1;
        rc = df_fail("%s%s: received %zu bytes, Content-Length said %llu", api_url ? "" : c->src->display, label, c->buf_len,
                     (unsigned long long)c->resp.length);
    }
    if (rc) {
        free(c->buf);
        c->buf = NULL;
        return -1;
    }
    c->buf[c->buf_len] = 0;
    return 0;
}

int http_whole(Conn *c, const char *file, size_t max, char **buf, size_t *len, RemoteInfo *info, int *missing,
               int *transient) {
    if (get_whole(c, file, NULL, max, missing, transient)) return -1;
    *buf = c->buf, *len = c->buf_len;
    c->buf = NULL;
    if (info) {
        resp_info(&c->resp, info);
        info->total = *len;
    }
    return 0;
}

int http_api(Conn *c, const char *url, size_t max, char **buf, size_t *len, long *status, int *transient) {
    int missing;
    int rc = get_whole(c, NULL, url, max, &missing, transient);
    *status = c->resp.status;
    if (rc) return -1;
    *buf = c->buf, *len = c->buf_len;
    c->buf = NULL;
    return 0;
}

/* Exponential backoff: backoff_ms, doubled per attempt, capped at 60 s; longer when the server
 * said Retry-After. */
static int backoff(const Conn *c, int attempt, const char *what) {
    const Source *s = c->src;
    if (attempt >= s->retries) return 0;
    long ms = (long)s->backoff_ms << (attempt < 16 ? attempt : 16);
    if (ms > 60000) ms = 60000;
    if (c->resp.retry_after * 1000L > ms) ms = c->resp.retry_after * 1000L;
    fprintf(stderr, "deltafin: %s; retrying in %.1f s (%d/%d)\n", what, ms / 1000.0, attempt + 1, s->retries);
    sleep_ms((int)ms);
    return 1;
}

int http_range_retry(Conn *c, const char *file, uint64_t off, uint64_t len, const RemoteInfo *expect, int fd,
                     uint8_t *mem, RemoteInfo *info) {
    uint64_t done = 0; /* bytes a failed attempt wrote (checked, of the expected file): kept */
    for (int attempt = 0, stale = 0;; attempt++) {
        int transient;
        if (!http_range(c, file, off + done, len - done, expect, fd, mem ? mem + done : NULL, info, &transient)) return 0;
        if (expect) done += c->got;
        else if (c->progress) atomic_fetch_sub(c->progress, c->got); /* not resumable: starts over */
        /* an expired signed URL (403), or a redirect target that now holds other bytes: the
         * file's resolve URL decides */
        if (c->used_cache && !transient && stale++ < 3) {
            urlcache_drop(c->cache, file);
            attempt--;
            continue;
        }
        if (!transient || !backoff(c, attempt, df_errmsg())) return -1;
    }
}

int http_whole_retry(Conn *c, const char *file, size_t max, char **buf, size_t *len, RemoteInfo *info, int *missing) {
    for (int attempt = 0;; attempt++) {
        int transient;
        if (!http_whole(c, file, max, buf, len, info, missing, &transient)) return 0;
        if (!transient || !backoff(c, attempt, df_errmsg())) return -1;
    }
}

int http_api_retry(Conn *c, const char *url, size_t max, char **buf, size_t *len, long *status) {
    for (int attempt = 0;; attempt++) {
        int transient;
        if (!http_api(c, url, max, buf, len, status, &transient)) return 0;
        if (!transient || !backoff(c, attempt, df_errmsg())) return -1;
    }
}

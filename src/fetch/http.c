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

#include "util/clock.h"
#include "util/err.h"

enum { MODE_RANGE, MODE_WHOLE };

#define URLCACHE_MAX 4096
#define URLCACHE_TTL_S 600.0

typedef struct {
    char *file, *url;
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

/* A fresh cached URL for file (new string) or NULL. */
static char *urlcache_get(UrlCache *uc, const char *file) {
    if (!uc) return NULL;
    pthread_mutex_lock(&uc->mu);
    int i = urlcache_find(uc, file);
    char *url = i >= 0 && df_now() - uc->e[i].t < URLCACHE_TTL_S ? df_strdup(uc->e[i].url) : NULL;
    pthread_mutex_unlock(&uc->mu);
    return url;
}

static void urlcache_put(UrlCache *uc, const char *file, const char *url) {
    if (!uc) return;
    pthread_mutex_lock(&uc->mu);
    int i = urlcache_find(uc, file);
    if (i < 0 && uc->n < URLCACHE_MAX) i = uc->n++, uc->e[i].file = df_strdup(file), uc->e[i].url = NULL;
    if (i >= 0) {
        free(uc->e[i].url);
        uc->e[i].url = df_strdup(url), uc->e[i].t = df_now();
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
    struct curl_slist *hdrs;
    _Atomic uint64_t *counter;
    /* the response being received (reset at every status line of a redirect chain) */
    long status;
    int have_cr, have_cl;
    uint64_t cr_a, cr_b, cr_total, cl;
    char linked[65];
    int retry_after;         /* seconds a 429/503 asked to wait (0: none) */
    /* the request */
    int mode, fd, checked;
    const char *file;
    uint8_t *mem;
    char *buf;
    size_t buf_len, max;
    uint64_t off, len, expect_total, got;
    char err[400];
    int err_transient;
};

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static int header_is(const char *line, size_t n, const char *name, const char **value) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return 0;
    *value = line + k + 1;
    while (**value == ' ' || **value == '\t') (*value)++;
    return 1;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    Conn *c = ud;
    size_t n = size * nitems;
    char tmp[512];
    size_t m = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
    memcpy(tmp, line, m), tmp[m] = 0;
    const char *v;
    unsigned long long a, b, t, x;
    if (!strncmp(tmp, "HTTP/", 5)) {
        c->have_cr = c->have_cl = 0;
        const char *sp = strchr(tmp, ' ');
        c->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if (header_is(tmp, m, "content-range", &v)) {
        c->have_cr = sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3;
        c->cr_a = a, c->cr_b = b, c->cr_total = t;
    } else if (header_is(tmp, m, "content-length", &v)) {
        c->have_cl = sscanf(v, "%llu", &x) == 1;
        c->cl = x;
    } else if (header_is(tmp, m, "retry-after", &v)) {
        long sec = strtol(v, NULL, 10); /* the HTTP-date form is ignored: plain backoff then */
        c->retry_after = sec > 0 && sec <= 600 ? (int)sec : 0;
    } else if (header_is(tmp, m, "x-linked-etag", &v)) {
        /* Hugging Face: the LFS object's SHA-256, quoted */
        char hex[65];
        if (sscanf(v, "\"%64[0-9a-f]\"", hex) == 1 && strlen(hex) == 64) memcpy(c->linked, hex, 65);
    }
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

static int status_transient(long s) { return s >= 500 || s == 408 || s == 429; }

static const char *status_hint(long s) {
    if (s == 401 || s == 403) return " (access denied: set HF_TOKEN to a token that may read the repository)";
    if (s == 404) return " (not found: check K3_HF_HOST, K3_HF_PATH and K3_HF_REVISION)";
    return "";
}

/* The first body bytes of a range response: is this exactly what was asked for? */
static size_t check_range_response(Conn *c) {
    uint64_t last = c->off + c->len - 1;
    if (c->status == 200)
        return fail_write(c, 1, "server answered 200 with the whole file instead of 206 for bytes %llu-%llu; nothing written",
                          (unsigned long long)c->off, (unsigned long long)last);
    if (c->status != 206)
        return fail_write(c, status_transient(c->status), "HTTP %ld%s", c->status, status_hint(c->status));
    if (!c->have_cr) return fail_write(c, 1, "206 without a Content-Range header");
    if (c->cr_a != c->off || c->cr_b != last)
        return fail_write(c, 1, "asked for bytes %llu-%llu, server sent %llu-%llu", (unsigned long long)c->off,
                          (unsigned long long)last, (unsigned long long)c->cr_a, (unsigned long long)c->cr_b);
    if (c->expect_total && c->cr_total != c->expect_total)
        return fail_write(c, 0, "the file changed on the server: it is now %llu bytes, the install expects %llu "
                                "(run setup again to start this file over)",
                          (unsigned long long)c->cr_total, (unsigned long long)c->expect_total);
    if (c->have_cl && c->cl != c->len)
        return fail_write(c, 1, "Content-Length %llu does not match the %llu bytes of the range", (unsigned long long)c->cl,
                          (unsigned long long)c->len);
    c->checked = 1;
    return 1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    Conn *c = ud;
    size_t n = size * nmemb;
    if (c->mode == MODE_WHOLE) {
        if (c->status != 200) return fail_write(c, status_transient(c->status), "HTTP %ld%s", c->status, status_hint(c->status));
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

static int perform(Conn *c, const char *file, int *transient) {
    char *resolve = source_url(c->src, file), *cached = c->mode == MODE_RANGE ? urlcache_get(c->cache, file) : NULL;
    const char *url = cached ? cached : resolve;
    c->used_cache = cached != NULL;
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    /* the token is for the hub: a cached URL on another host (the CDN) does not get it */
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, same_origin(url, resolve) ? c->hdrs : NULL);
    c->status = 0, c->have_cr = c->have_cl = 0, c->checked = 0, c->got = 0, c->err[0] = 0, c->linked[0] = 0;
    c->retry_after = 0;
    c->file = file;
    CURLcode res = curl_easy_perform(c->h);
    long code = 0;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
    if (code) c->status = code;
    char *effective = NULL;
    if (res == CURLE_OK && !*c->err && !cached && c->mode == MODE_RANGE && c->status == 206 &&
        curl_easy_getinfo(c->h, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK && effective && strcmp(effective, resolve))
        urlcache_put(c->cache, file, effective);
    free(resolve), free(cached);
    if (*c->err) {
        *transient = c->err_transient;
        return df_fail("%s%s: %s", c->src->display, file, c->err);
    }
    if (res != CURLE_OK) {
        *transient = res != CURLE_UNSUPPORTED_PROTOCOL && res != CURLE_URL_MALFORMAT && res != CURLE_TOO_MANY_REDIRECTS &&
                     res != CURLE_PEER_FAILED_VERIFICATION && res != CURLE_SSL_CACERT_BADFILE;
        return df_fail("%s%s: %s", c->src->display, file, curl_easy_strerror(res));
    }
    return 0;
}

int http_range(Conn *c, const char *file, uint64_t off, uint64_t len, uint64_t expect_total, int fd, uint8_t *mem,
               RemoteInfo *info, int *transient) {
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off, (unsigned long long)(off + len - 1));
    c->mode = MODE_RANGE, c->fd = fd, c->mem = mem, c->off = off, c->len = len, c->expect_total = expect_total;
    curl_easy_setopt(c->h, CURLOPT_RANGE, range);
    curl_easy_setopt(c->h, CURLOPT_NOBODY, 0L);
    *transient = 0;
    if (perform(c, file, transient)) return -1;
    if (!c->checked && c->len) { /* no body at all: the status says why */
        if (!check_range_response(c)) {
            *transient = c->err_transient;
            return df_fail("%s%s: %s", c->src->display, file, c->err);
        }
    }
    if (c->got != len) {
        *transient = 1;
        return df_fail("%s%s: bytes %s: received %llu of %llu bytes", c->src->display, file, range,
                       (unsigned long long)c->got, (unsigned long long)len);
    }
    if (info) {
        info->total = c->cr_total;
        memcpy(info->sha256, c->linked, sizeof c->linked);
    }
    return 0;
}

int http_whole(Conn *c, const char *file, size_t max, char **buf, size_t *len, RemoteInfo *info, int *missing,
               int *transient) {
    c->mode = MODE_WHOLE, c->max = max, c->buf_len = 0, c->buf = df_malloc(max + 1);
    curl_easy_setopt(c->h, CURLOPT_RANGE, NULL);
    *missing = 0, *transient = 0;
    int rc = perform(c, file, transient);
    *missing = c->status == 404;
    if (!rc && c->status != 200) {
        *missing = c->status == 404;
        *transient = status_transient(c->status);
        rc = df_fail("%s%s: HTTP %ld%s", c->src->display, file, c->status, status_hint(c->status));
    }
    if (!rc && c->have_cl && c->cl != c->buf_len) {
        *transient = 1;
        rc = df_fail("%s%s: received %zu bytes, Content-Length said %llu", c->src->display, file, c->buf_len,
                     (unsigned long long)c->cl);
    }
    if (rc) {
        free(c->buf);
        c->buf = NULL;
        return -1;
    }
    c->buf[c->buf_len] = 0;
    *buf = c->buf, *len = c->buf_len;
    c->buf = NULL;
    if (info) {
        info->total = c->buf_len;
        memcpy(info->sha256, c->linked, sizeof c->linked);
    }
    return 0;
}

/* Exponential backoff: backoff_ms, doubled per attempt, capped at 60 s; longer when the server
 * said Retry-After. */
static int backoff(const Conn *c, int attempt, const char *what) {
    const Source *s = c->src;
    if (attempt >= s->retries) return 0;
    long ms = (long)s->backoff_ms << (attempt < 16 ? attempt : 16);
    if (ms > 60000) ms = 60000;
    if (c->retry_after * 1000L > ms) ms = c->retry_after * 1000L;
    fprintf(stderr, "deltafin: %s; retrying in %.1f s (%d/%d)\n", what, ms / 1000.0, attempt + 1, s->retries);
    sleep_ms((int)ms);
    return 1;
}

int http_range_retry(Conn *c, const char *file, uint64_t off, uint64_t len, uint64_t expect_total, int fd,
                     uint8_t *mem, RemoteInfo *info) {
    for (int attempt = 0, stale = 0;; attempt++) {
        int transient;
        if (!http_range(c, file, off, len, expect_total, fd, mem, info, &transient)) return 0;
        if (c->used_cache && !transient && stale++ < 3) { /* expired signed URL (403...): re-resolve */
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

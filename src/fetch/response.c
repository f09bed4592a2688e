#include "fetch/response.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fetch/digest.h"
#include "util/err.h"

void resp_begin(Response *r) { memset(r, 0, sizeof *r); }

/* A decimal number of at most 19 digits (no sign, no overflow); *end past it. */
static int parse_u64(const char *s, const char *lim, uint64_t *v, const char **end) {
    const char *p = s;
    uint64_t x = 0;
    while (p < lim && *p >= '0' && *p <= '9' && p - s < 19) x = x * 10 + (uint64_t)(*p++ - '0');
    if (p == s || (p < lim && *p >= '0' && *p <= '9')) return -1;
    *v = x, *end = p;
    return 0;
}

static const char *skip_ws(const char *p, const char *lim) {
    while (p < lim && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* Trailing white space and CR LF removed. */
static const char *trim_end(const char *p, const char *lim) {
    while (lim > p && (lim[-1] == '\r' || lim[-1] == '\n' || lim[-1] == ' ' || lim[-1] == '\t')) lim--;
    return lim;
}

/* "bytes A-B/T" with A <= B < T. */
static void parse_content_range(Response *r, const char *v, const char *lim) {
    uint64_t a, b, t;
    const char *p;
    r->have_range = 0;
    if (lim - v < 6 || strncasecmp(v, "bytes ", 6)) return;
    if (parse_u64(v + 6, lim, &a, &p) || p >= lim || *p != '-' || parse_u64(p + 1, lim, &b, &p) || p >= lim || *p != '/' ||
        parse_u64(p + 1, lim, &t, &p) || p != lim || a > b || b >= t)
        return;
    r->have_range = 1, r->range_first = a, r->range_last = b, r->range_total = t;
}

/* An entity tag: optional W/, then "..." of visible characters other than '"'. */
static void parse_etag(char *out, const char *v, const char *lim) {
    out[0] = 0;
    int weak = lim - v >= 2 && v[0] == 'W' && v[1] == '/';
    const char *q = v + (weak ? 2 : 0);
    if (lim - q < 2 || *q != '"' || lim[-1] != '"') return;
    size_t n = (size_t)(lim - q - 2);
    if (n == 0 || n > 128) return;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)q[1 + i] <= 0x20 || (unsigned char)q[1 + i] >= 0x7f || q[1 + i] == '"') return;
    snprintf(out, RESP_TAG_MAX, "%s%.*s", weak ? "W/" : "", (int)n, q + 1);
}

static int name_is(const char *line, const char *colon, const char *name) {
    return (size_t)(colon - line) == strlen(name) && !strncasecmp(line, name, (size_t)(colon - line));
}

void resp_header(Response *r, const char *line, size_t n) {
    const char *lim = trim_end(line, line + n);
    if (lim - line >= 5 && !strncmp(line, "HTTP/", 5)) { /* a new response of the chain */
        const char *sp = memchr(line, ' ', (size_t)(lim - line));
        uint64_t code = 0;
        const char *end;
        r->status = sp && !parse_u64(sp + 1, lim, &code, &end) && code < 1000 ? (long)code : 0;
        r->n_status++;
        r->have_range = r->have_length = 0, r->retry_after = 0, r->etag[0] = 0;
        return;
    }
    const char *colon = memchr(line, ':', (size_t)(lim - line));
    if (!colon) return;
    const char *v = skip_ws(colon + 1, lim), *end;
    uint64_t x;
    if (name_is(line, colon, "content-range")) parse_content_range(r, v, lim);
    else if (name_is(line, colon, "content-length"))
        r->have_length = !parse_u64(v, lim, &x, &end) && end == lim, r->length = r->have_length ? x : 0;
    else if (name_is(line, colon, "retry-after")) /* the HTTP-date form is ignored: plain backoff then */
        r->retry_after = !parse_u64(v, lim, &x, &end) && end == lim && x > 0 && x <= 600 ? (int)x : 0;
    else if (name_is(line, colon, "etag")) parse_etag(r->etag, v, lim);
    else if (name_is(line, colon, "x-linked-etag")) parse_etag(r->linked_etag, v, lim);
    else if (name_is(line, colon, "x-repo-commit")) {
        size_t len = (size_t)(lim - v);
        char c[41] = "";
        if (len == 40) memcpy(c, v, 40), c[40] = 0;
        if (is_hex_digest(c, 40)) memcpy(r->commit, c, 41);
    }
}

void resp_info(const Response *r, RemoteInfo *info) {
    memset(info, 0, sizeof *info);
    info->total = r->have_range ? r->range_total : r->have_length ? r->length : 0;
    snprintf(info->identity, sizeof info->identity, "%s", *r->linked_etag ? r->linked_etag : r->etag);
    if (is_hex_digest(r->linked_etag, 64)) memcpy(info->sha256, r->linked_etag, 65);
    memcpy(info->commit, r->commit, sizeof r->commit);
}

static int say(char *err, size_t errlen, const char *fmt, ...) DF_PRINTF(3, 4);
static int say(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int resp_status_transient(long s) { return s >= 500 || s == 408 || s == 429; }

const char *resp_status_hint(long s) {
    if (s == 401 || s == 403) return " (access denied: set HF_TOKEN to a token that may read the repository)";
    if (s == 404) return " (not found: check K3_HF_HOST, K3_HF_PATH and K3_HF_REVISION)";
    if (s == 416) return " (the server does not hold the bytes asked for)";
    return "";
}

static const char *short_id(const char *s, char *buf, size_t len) {
    snprintf(buf, len, "%.20s%s", s, strlen(s) > 20 ? "..." : "");
    return buf;
}

int resp_check_identity(const RemoteInfo *got, const RemoteInfo *expect, char *err, size_t errlen) {
    char a[32], b[32];
    if (expect->total && got->total && got->total != expect->total)
        return say(err, errlen, "the file changed on the server: it is now %llu bytes, the install expects %llu",
                   (unsigned long long)got->total, (unsigned long long)expect->total);
    if (*expect->commit && *got->commit && strcmp(expect->commit, got->commit))
        return say(err, errlen, "the server answered from commit %.12s, the install is commit %.12s: refusing to mix "
                                "revisions", got->commit, expect->commit);
    if (*expect->identity && strcmp(expect->identity, got->identity)) {
        if (!*got->identity)
            return say(err, errlen, "the server sent no ETag, so these bytes cannot be tied to the installed version "
                                    "(ETag \"%s\")", short_id(expect->identity, a, sizeof a));
        return say(err, errlen, "the server now has another version of this file (ETag \"%s\", the install has \"%s\"): "
                                "refusing to mix versions; deltafin setup updates the whole install",
                   short_id(got->identity, a, sizeof a), short_id(expect->identity, b, sizeof b));
    }
    return 0;
}

int resp_check_range(const Response *r, uint64_t off, uint64_t len, const RemoteInfo *expect, char *err, size_t errlen,
                     int *transient) {
    uint64_t last = off + len - 1;
    *transient = 0;
    if (r->status == 200)
        return say(err, errlen, "server answered 200 with the whole file instead of 206 for bytes %llu-%llu: it does "
                                "not support range requests, which an install needs; nothing written",
                   (unsigned long long)off, (unsigned long long)last);
    if (r->status != 206) {
        *transient = resp_status_transient(r->status);
        return say(err, errlen, "HTTP %ld%s", r->status, resp_status_hint(r->status));
    }
    *transient = 1; /* a proxy mangling one answer; retried, within the retry budget */
    if (!r->have_range) return say(err, errlen, "206 without a valid Content-Range header");
    if (r->range_first != off || r->range_last != last)
        return say(err, errlen, "asked for bytes %llu-%llu, server sent %llu-%llu", (unsigned long long)off,
                   (unsigned long long)last, (unsigned long long)r->range_first, (unsigned long long)r->range_last);
    if (r->have_length && r->length != len)
        return say(err, errlen, "Content-Length %llu does not match the %llu bytes of the range", (unsigned long long)r->length,
                   (unsigned long long)len);
    *transient = 0;
    RemoteInfo got;
    resp_info(r, &got);
    return expect ? resp_check_identity(&got, expect, err, errlen) : 0;
}

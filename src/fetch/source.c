#include "fetch/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static int safe_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

static int is_loopback(const char *name, size_t len) {
    if (len == 9 && !strncmp(name, "localhost", 9)) return 1;
    if (len == 5 && !strncmp(name, "[::1]", 5)) return 1;
    unsigned a, b, c, d;
    char tail;
    char tmp[64];
    if (len >= sizeof tmp) return 0;
    memcpy(tmp, name, len), tmp[len] = 0;
    return sscanf(tmp, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

int source_check_host(const char *host, int *loopback, int *explicit_http) {
    *explicit_http = 0;
    if (!strncmp(host, "http://", 7)) host += 7, *explicit_http = 1;
    else if (!strncmp(host, "https://", 8)) host += 8;
    size_t n = strlen(host);
    if (n && host[n - 1] == '/') n--; /* a trailing slash is harmless */
    if (n == 0 || n > 253) return df_fail("empty or too long");
    size_t name_len = n;
    if (host[0] == '[') { /* [v6] literal: only loopback is accepted */
        const char *close = memchr(host, ']', n);
        if (!close) return df_fail("'%s': unterminated [ ]", host);
        name_len = (size_t)(close - host) + 1;
    } else {
        const char *colon = memchr(host, ':', n);
        if (colon) name_len = (size_t)(colon - host);
        for (size_t i = 0; i < name_len; i++)
            if (!safe_char(host[i]) || host[i] == '_')
                return df_fail("'%s': not a host name (letters, digits, '-' and '.' only)", host);
        if (name_len == 0 || host[0] == '.' || host[0] == '-') return df_fail("'%s': not a host name", host);
    }
    if (name_len < n) {
        if (host[name_len] != ':' || name_len + 1 == n) return df_fail("'%s': bad port", host);
        long port = 0;
        for (size_t i = name_len + 1; i < n; i++) {
            if (host[i] < '0' || host[i] > '9' || port > 65535) return df_fail("'%s': bad port", host);
            port = port * 10 + (host[i] - '0');
        }
        if (port < 1 || port > 65535) return df_fail("'%s': port out of range", host);
    }
    *loopback = is_loopback(host, name_len);
    if (host[0] == '[' && !*loopback) return df_fail("'%s': IPv6 literals other than [::1] are not supported", host);
    if (*explicit_http && !*loopback)
        return df_fail("'%s': plain http:// is allowed only for loopback; use https", host);
    return 0;
}

int source_check_path(const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n > 200) return df_fail("empty or too long");
    if (path[0] == '/' || path[n - 1] == '/') return df_fail("'%s': no leading or trailing '/'", path);
    const char *seg = path;
    for (size_t i = 0; i <= n; i++) {
        if (path[i] == '/' || path[i] == 0) {
            size_t len = (size_t)(path + i - seg);
            if (len == 0 || (len <= 2 && !strncmp(seg, "..", len)))
                return df_fail("'%s': empty, '.' or '..' segment", path);
            seg = path + i + 1;
        } else if (!safe_char(path[i])) {
            return df_fail("'%s': only letters, digits, '-', '_', '.' and '/' are allowed", path);
        }
    }
    return 0;
}

int source_check_revision(const char *rev) {
    if (strchr(rev, '/') || source_check_path(rev)) return df_fail("'%s': not a revision name", rev);
    return 0;
}

int source_check_token(const char *tok) {
    size_t tn = strlen(tok);
    if (tn > 1000) return df_fail("longer than 1000 characters");
    for (size_t i = 0; i < tn; i++)
        if (tok[i] <= ' ' || tok[i] > '~') return df_fail("contains a space or control character");
    return 0;
}

int source_init(Source *s, const FetchOptions *o) {
    memset(s, 0, sizeof *s);
    const char *host = o->host, *path = o->path, *rev = o->revision, *tok = o->token;
    int loop, http;
    if (source_check_host(host, &loop, &http)) return df_failctx("K3_HF_HOST");
    if (source_check_path(path)) return df_failctx("K3_HF_PATH");
    if (source_check_revision(rev)) return df_failctx("K3_HF_REVISION");
    const char *bare = host + (http ? 7 : !strncmp(host, "https://", 8) ? 8 : 0);
    size_t blen = strlen(bare);
    if (blen && bare[blen - 1] == '/') blen--;
    snprintf(s->origin, sizeof s->origin, "%s://%.*s", http ? "http" : "https", (int)blen, bare);
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->revision, sizeof s->revision, "%s", rev);
    snprintf(s->repo, sizeof s->repo, "%s/%s", s->origin, path);
    source_pin(s, "");
    if (tok && *tok) {
        if (source_check_token(tok)) return df_failctx("HF_TOKEN");
        snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", tok);
    }
    s->connect_timeout_s = o->connect_timeout_s, s->stall_timeout_s = o->stall_timeout_s;
    s->retries = o->retries, s->backoff_ms = o->backoff_ms, s->parallel = o->parallel;
    s->chunk_bytes = (unsigned long long)o->chunk_kb << 10;
    return 0;
}

void source_pin(Source *s, const char *commit) {
    snprintf(s->commit, sizeof s->commit, "%s", commit);
    const char *origin = s->origin + (strncmp(s->origin, "http://", 7) ? 8 : 7);
    snprintf(s->display, sizeof s->display, "%s/%s/resolve/%s/", origin, s->path, *commit ? commit : s->revision);
    snprintf(s->base, sizeof s->base, "%s/%s/resolve/%s/", s->origin, s->path, *commit ? commit : s->revision);
}

char *source_api_url(const Source *s) {
    size_t n = strlen(s->origin) + strlen(s->path) + strlen(s->revision) + 64;
    char *u = df_malloc(n);
    snprintf(u, n, "%s/api/models/%s/revision/%s?blobs=true", s->origin, s->path, s->revision);
    return u;
}

char *source_url(const Source *s, const char *file) {
    size_t n = strlen(s->base) + strlen(file) + 1;
    char *u = df_malloc(n);
    snprintf(u, n, "%s%s", s->base, file);
    return u;
}

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
    if (n == 0 || n > 253) return df_fail("K3_HF_HOST: empty or too long");
    size_t name_len = n;
    if (host[0] == '[') { /* [v6] literal: only loopback is accepted */
        const char *close = memchr(host, ']', n);
        if (!close) return df_fail("K3_HF_HOST: '%s': unterminated [ ]", host);
        name_len = (size_t)(close - host) + 1;
    } else {
        const char *colon = memchr(host, ':', n);
        if (colon) name_len = (size_t)(colon - host);
        for (size_t i = 0; i < name_len; i++)
            if (!safe_char(host[i]) || host[i] == '_')
                return df_fail("K3_HF_HOST: '%s': not a host name (letters, digits, '-' and '.' only)", host);
        if (name_len == 0 || host[0] == '.' || host[0] == '-') return df_fail("K3_HF_HOST: '%s': not a host name", host);
    }
    if (name_len < n) {
        if (host[name_len] != ':' || name_len + 1 == n) return df_fail("K3_HF_HOST: '%s': bad port", host);
        long port = 0;
        for (size_t i = name_len + 1; i < n; i++) {
            if (host[i] < '0' || host[i] > '9' || port > 65535) return df_fail("K3_HF_HOST: '%s': bad port", host);
            port = port * 10 + (host[i] - '0');
        }
        if (port < 1 || port > 65535) return df_fail("K3_HF_HOST: '%s': port out of range", host);
    }
    *loopback = is_loopback(host, name_len);
    if (host[0] == '[' && !*loopback) return df_fail("K3_HF_HOST: '%s': IPv6 literals other than [::1] are not supported", host);
    if (*explicit_http && !*loopback)
        return df_fail("K3_HF_HOST: '%s': plain http:// is allowed only for loopback; use https", host);
    return 0;
}

int source_check_path(const char *path, const char *what) {
    size_t n = strlen(path);
    if (n == 0 || n > 200) return df_fail("%s: empty or too long", what);
    if (path[0] == '/' || path[n - 1] == '/') return df_fail("%s: '%s': no leading or trailing '/'", what, path);
    const char *seg = path;
    for (size_t i = 0; i <= n; i++) {
        if (path[i] == '/' || path[i] == 0) {
            size_t len = (size_t)(path + i - seg);
            if (len == 0 || (len <= 2 && !strncmp(seg, "..", len)))
                return df_fail("%s: '%s': empty, '.' or '..' segment", what, path);
            seg = path + i + 1;
        } else if (!safe_char(path[i])) {
            return df_fail("%s: '%s': only letters, digits, '-', '_', '.' and '/' are allowed", what, path);
        }
    }
    return 0;
}

static int env_int(const char *name, int def, int lo, int hi, int *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) return df_fail("%s: '%s' is not an integer in [%d, %d]", name, v, lo, hi);
    *out = (int)x;
    return 0;
}

int source_from_env(Source *s) {
    memset(s, 0, sizeof *s);
    const char *host = getenv("K3_HF_HOST"), *path = getenv("K3_HF_PATH"), *rev = getenv("K3_HF_REVISION");
    if (!host || !*host) host = "huggingface.co";
    if (!path || !*path) path = "moonshotai/Kimi-K3";
    if (!rev || !*rev) rev = "main";
    int loop, http;
    if (source_check_host(host, &loop, &http) || source_check_path(path, "K3_HF_PATH")) return -1;
    if (strchr(rev, '/') || source_check_path(rev, "K3_HF_REVISION")) return df_fail("K3_HF_REVISION: '%s': not a revision name", rev);
    const char *bare = host + (http ? 7 : !strncmp(host, "https://", 8) ? 8 : 0);
    size_t blen = strlen(bare);
    if (blen && bare[blen - 1] == '/') blen--;
    snprintf(s->display, sizeof s->display, "%.*s/%s/resolve/%s/", (int)blen, bare, path, rev);
    snprintf(s->base, sizeof s->base, "%s://%s", http ? "http" : "https", s->display);
    const char *tok = getenv("HF_TOKEN");
    if (tok && *tok) {
        size_t tn = strlen(tok);
        if (tn > 1000) return df_fail("HF_TOKEN: longer than 1000 characters");
        for (size_t i = 0; i < tn; i++)
            if (tok[i] <= ' ' || tok[i] > '~') return df_fail("HF_TOKEN: contains a space or control character");
        snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", tok);
    }
    int chunk_kb;
    if (env_int("K3_FETCH_CONNECT_TIMEOUT", 20, 1, 3600, &s->connect_timeout_s) ||
        env_int("K3_FETCH_STALL_TIMEOUT", 60, 1, 3600, &s->stall_timeout_s) ||
        env_int("K3_FETCH_RETRIES", 6, 0, 100, &s->retries) ||
        env_int("K3_FETCH_BACKOFF_MS", 1000, 0, 600000, &s->backoff_ms) ||
        env_int("K3_FETCH_PARALLEL", 8, 1, 64, &s->parallel) ||
        env_int("K3_FETCH_CHUNK_KB", 65536, 4, 4 << 20, &chunk_kb))
        return -1;
    s->chunk_bytes = (unsigned long long)chunk_kb << 10;
    return 0;
}

char *source_url(const Source *s, const char *file) {
    size_t n = strlen(s->base) + strlen(file) + 1;
    char *u = df_malloc(n);
    snprintf(u, n, "%s%s", s->base, file);
    return u;
}

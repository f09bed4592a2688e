#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char err_buf[1024];

/* Messages are one line and often quote file contents or arguments: a control character (a
 * CRLF file's carriage return, an escape sequence) is written as \r, \n, \t or \xNN so it can
 * neither split the line nor act on the terminal. Copies src into dst[cap], NUL-terminated. */
void df_escape_controls(char *dst, size_t cap, const char *src) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 1 < cap; p++) {
        char esc[5];
        size_t n = 1;
        if (*p >= 0x20 && *p != 0x7f) esc[0] = (char)*p;
        else if (*p == '\r' || *p == '\n' || *p == '\t')
            esc[0] = '\\', esc[1] = *p == '\r' ? 'r' : *p == '\n' ? 'n' : 't', n = 2;
        else n = (size_t)snprintf(esc, sizeof esc, "\\x%02X", *p);
        if (o + n >= cap) break;
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o] = 0;
}

void df_invariant_broken(const char *file, int line, const char *cond, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "deltafin: invariant broken at %s:%d: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

int df_fail(const char *fmt, ...) {
    char raw[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    df_escape_controls(err_buf, sizeof err_buf, raw);
    return -1;
}

int df_failctx(const char *fmt, ...) {
    char raw[sizeof err_buf], out[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    df_escape_controls(out, sizeof out, raw);
    size_t n = strlen(out), at = n < sizeof out - 3 ? n : sizeof out - 3;
    memcpy(out + at, ": ", 2);
    at += 2;
    size_t rest = strnlen(err_buf, sizeof err_buf - 1);
    if (rest > sizeof out - 1 - at) rest = sizeof out - 1 - at;
    memcpy(out + at, err_buf, rest);
    out[at + rest] = 0;
    memcpy(err_buf, out, at + rest + 1);
    return -1;
}

const char *df_errmsg(void) { return err_buf; }
void df_errclear(void) { err_buf[0] = 0; }

/* The library's single abort point (err.h). */
static _Noreturn void oom(size_t n) {
    fflush(stdout);
    fprintf(stderr, "deltafin: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *df_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *df_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *df_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *df_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(df_malloc(n), s, n);
}

void *df_aligned_alloc(size_t alignment, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, alignment, n ? n : alignment) != 0) oom(n);
    return p;
}

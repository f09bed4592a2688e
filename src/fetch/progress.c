#include "fetch/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

const char *fmt_bytes(char *buf, size_t len, uint64_t n) {
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 5) v /= 1000, u++;
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static ProgressShare share; /* the process's rule for sharing the terminal (progress_share) */

void progress_share(const ProgressShare *s) {
    ProgressShare none = {0};
    share = s ? *s : none;
}

void progress_note(const char *fmt, ...) {
    if (isatty(2) && share.claim) share.claim(share.ctx);
    va_list ap;
    va_start(ap, fmt);
    fputs("deltafin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

void progress_start(Progress *p, const char *what, uint64_t total) {
    p->what = what, p->total = total;
    p->t0 = p->last = df_now();
    p->tty = isatty(2);
    p->drawn = 0;
    p->saved = 0, p->show_saved = 0;
}

void progress_saved(Progress *p, uint64_t saved) { p->saved = saved, p->show_saved = 1; }

void progress_show(Progress *p, uint64_t done, int final) {
    double now = df_now(), el = now - p->t0;
    if (!final && now - p->last < (p->tty ? 0.25 : 5.0)) return;
    p->last = now;
    if (done > p->total) done = p->total;
    char a[32], b[32], r[32], eta[32] = "-", saved[48] = "";
    double rate = el > 0 ? done / el : 0;
    if (rate > 0 && !final) {
        long s = (long)((p->total - done) / rate);
        snprintf(eta, sizeof eta, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    }
    if (p->show_saved && !final) {
        char k[32];
        snprintf(saved, sizeof saved, ", %s saved", fmt_bytes(k, sizeof k, p->saved > done ? done : p->saved));
    }
    if (final && p->tty && share.transient) { /* nothing of it stays among the generated text */
        if (p->drawn) fputs("\r\033[K", stderr), fflush(stderr);
        return;
    }
    if (p->tty && !p->drawn && share.claim) share.claim(share.ctx);
    p->drawn = 1;
    /* on a terminal the line is erased first: a shorter line leaves nothing of the longer one */
    fprintf(stderr, "%s%s: %s / %s (%.1f%%)%s, %s/s, %s %s", p->tty ? "\r\033[K" : "", p->what,
            fmt_bytes(a, sizeof a, done), fmt_bytes(b, sizeof b, p->total), p->total ? 100.0 * done / p->total : 100.0,
            saved, fmt_bytes(r, sizeof r, (uint64_t)rate), final ? "took" : "ETA", final ? "" : eta);
    if (final) fprintf(stderr, "%.1f s\n", el);
    else if (!p->tty) fputc('\n', stderr);
    fflush(stderr);
}

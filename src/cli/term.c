/* term.c - status lines beside generated text (term.h). */
#include "cli/term.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "fetch/progress.h"
#include "util/clock.h"

static struct {
    FILE *status;    /* where status lines go: stderr when it is a terminal, else stdout when that is
                      * one, else NULL (none) */
    int out_there;   /* stdout is on that terminal */
    int err_there;   /* stderr is on that terminal */
    int shown;       /* a status line is on the screen */
    int midline;     /* text left the cursor in the middle of a line */
    int out_midline; /* the last text written to stdout did not end its line */
    int out_wrote;   /* some text was written to stdout */
} tm;

/* An on-demand fetch takes the line: the text in progress is ended, a status line given up. */
static void claim(void *ctx) {
    (void)ctx;
    if (tm.midline && !tm.shown) fputc('\n', stderr);
    tm.midline = 0;
    tm.shown = 0; /* the fetch display overwrites it and erases itself */
}

void term_init(void) {
    struct stat o, e;
    int out = isatty(STDOUT_FILENO), err = isatty(STDERR_FILENO);
    int same = out && err && fstat(STDOUT_FILENO, &o) == 0 && fstat(STDERR_FILENO, &e) == 0 && o.st_rdev == e.st_rdev;
    tm.status = err ? stderr : out ? stdout : NULL;
    tm.err_there = err;
    tm.out_there = out && (!err || same);
    ProgressShare share = {claim, NULL, 1}; /* fetch progress draws on stderr */
    progress_share(&share);
}

int term_status_on(void) { return tm.status != NULL; }

void term_status(const char *fmt, ...) {
    if (!tm.status) return;
    if (tm.midline && !tm.shown) fputc('\n', tm.status); /* below the text, never over it */
    tm.midline = 0;
    va_list ap;
    fputs("\r\033[K", tm.status);
    va_start(ap, fmt);
    vfprintf(tm.status, fmt, ap);
    va_end(ap);
    fflush(tm.status);
    tm.shown = 1;
}

void term_status_clear(void) {
    if (!tm.shown) return;
    fputs("\r\033[K", tm.status);
    fflush(tm.status);
    tm.shown = 0;
}

void term_write(FILE *f, const void *p, size_t n) {
    if (!n) return;
    int there = f == stderr ? tm.err_there : tm.out_there; /* on the status lines' terminal */
    if (there) {
        fflush(f == stderr ? stdout : stderr);
        term_status_clear();
    }
    fwrite(p, 1, n, f);
    fflush(f);
    if (there) tm.midline = ((const char *)p)[n - 1] != '\n';
    if (f == stdout) tm.out_midline = ((const char *)p)[n - 1] != '\n', tm.out_wrote = 1;
}

int term_out_line_ended(void) { return tm.out_wrote && !tm.out_midline; }

const char *term_duration(char *buf, size_t n, double s) {
    if (s < 60) snprintf(buf, n, "%.1f s", s);
    else if (s < 3600) snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    return buf;
}

void prefill_meter_start(PrefillMeter *m, size_t held, size_t total) {
    memset(m, 0, sizeof *m);
    m->t0 = m->last = df_now();
    m->base = held, m->total = total;
    m->started = 1;
}

void prefill_meter_show(PrefillMeter *m, size_t held) {
    double now = df_now(), el = now - m->t0;
    if (!m->started || !tm.status || el < 0.3 || now - m->last < 0.1) return;
    m->last = now;
    size_t done = held > m->base ? held - m->base : 0, all = m->total > m->base ? m->total - m->base : 0;
    double rate = done / el;
    char left[32] = "?";
    if (rate > 0) term_duration(left, sizeof left, (all - done) / rate);
    term_status("reading the prompt: %zu/%zu tokens, %.1f tokens/s, %s left", done, all, rate, left);
}

void term_tool_calls(const json_t *calls, size_t *shown) {
    for (; *shown < json_array_size(calls); (*shown)++) {
        const json_t *fn = json_object_get(json_array_get(calls, *shown), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        char *line;
        int n = asprintf(&line, "%s[tool call] %s %s\n", tm.out_midline ? "\n" : "", name ? name : "?", args ? args : "{}");
        if (n < 0) continue;
        term_write(stdout, line, (size_t)n);
        free(line);
    }
}

void term_thinking(ThinkingOut *t, const char *text, size_t n) {
    if (!n) return;
    if (!t->open && tm.err_there) term_write(stderr, "\033[2m", 4);
    t->open = 1;
    term_write(stderr, text, n);
}

void term_thinking_end(ThinkingOut *t) {
    if (!t->open) return;
    t->open = 0;
    if (tm.err_there) term_write(stderr, "\033[0m\n", 5);
    else term_write(stderr, "\n", 1);
}

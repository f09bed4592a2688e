/* The transfer progress display (src/fetch/progress.c) on a terminal (a pseudo-terminal here):
 * every redraw erases the line first, so a shorter line leaves nothing of a longer one ("took
 * 1.2 s0"); a display that shares the terminal asks for the line before it first draws, and a
 * transient one (on-demand fetches among generated text) erases itself when done; one that never
 * drew leaves no trace at all. */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fetch/progress.h"

static int claims;
static void count_claim(void *ctx) {
    (void)ctx;
    claims++;
}

static void nap(double s) {
    struct timespec ts = {0, (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs fn with stderr on a new pseudo-terminal; returns what the terminal received. */
static char *on_terminal(void (*fn)(void)) {
    static char got[8192];
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    CHECK(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    CHECK(slave >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(slave, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved), close(slave);
    /* what was written may reach the master side in pieces (a loaded machine): read until quiet */
    size_t n = 0;
    struct pollfd pfd = {master, POLLIN, 0};
    while (n < sizeof got - 1 && poll(&pfd, 1, 200) > 0) {
        ssize_t k = read(master, got + n, sizeof got - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    got[n] = 0;
    close(master);
    /* the terminal turns "\n" into "\r\n": count only what the program wrote */
    char *w = got;
    for (char *r = got; *r; r++)
        if (!(r[0] == '\r' && r[1] == '\n')) *w++ = *r;
    *w = 0;
    return got;
}

static void long_then_short(void) {
    Progress p;
    progress_start(&p, "fetch", 123456789012ull);
    nap(0.3);
    progress_show(&p, 98765432101ull, 0); /* a long line with a rate and an ETA */
    progress_show(&p, 123456789012ull, 1);
}

static void every_redraw_erases_the_line(void) {
    progress_share(NULL);
    const char *out = on_terminal(long_then_short);
    /* two lines drawn, each from the start of an erased line; the closing one ends the line */
    const char *second = strstr(out + 1, "\r\033[K");
    CHECK_MSG(!strncmp(out, "\r\033[Kfetch: ", 10), "first draw: '%.40s'", out);
    CHECK_MSG(second && strstr(second, "took ") && out[strlen(out) - 1] == '\n', "closing line: '%s'", out);
}

static void transient_draw(void) {
    Progress p;
    progress_start(&p, "fetching 4 experts of layer 1", 4000);
    nap(0.3);
    progress_show(&p, 1000, 0);
    progress_show(&p, 4000, 1);
}

static void quick_transient(void) {
    Progress p;
    progress_start(&p, "fetching 1 expert of layer 2", 1000);
    progress_show(&p, 1000, 1);
}

static void a_shared_display_claims_the_line_and_erases_itself(void) {
    ProgressShare share = {count_claim, NULL, 1};
    progress_share(&share);
    claims = 0;
    const char *out = on_terminal(transient_draw);
    CHECK_MSG(claims == 1, "claims %d", claims);
    size_t n = strlen(out);
    CHECK_MSG(!strncmp(out, "\r\033[Kfetching 4 experts of layer 1: ", 34), "'%s'", out);
    CHECK_MSG(n >= 4 && !strcmp(out + n - 4, "\r\033[K") && !strstr(out, "took") && !strchr(out, '\n'),
              "a transient display left something: '%s'", out);
    claims = 0;
    out = on_terminal(quick_transient); /* finished before its first draw: nothing at all */
    CHECK_MSG(claims == 0 && out[0] == 0, "claims %d, '%s'", claims, out);
    progress_share(NULL);
}

int main(void) {
    RUN(every_redraw_erases_the_line);
    RUN(a_shared_display_claims_the_line_and_erases_itself);
    return check_summary();
}

/* bench_child.c - one measured run: `deltafin run` in a child process, waited for without
 * missing an interrupt, its JSON read back.
 *
 * Bench keeps SIGINT and SIGTERM blocked and takes them with plat_wait_signal (sigtimedwait)
 * while a child runs: a Ctrl-C (which the terminal also sends to the child) or a kill stops the
 * child with SIGTERM and is reported to the caller, which cleans up. The child starts with the
 * default signal mask. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "util/err.h"
#include "util/platform.h"

static sigset_t stop_signals(void) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGCHLD);
    return s;
}

static void on_sigchld(int sig) { (void)sig; }

void bench_signals_block(void) {
    /* SIGCHLD's default action is to discard it: a handler keeps it pending while blocked */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t s = stop_signals();
    sigprocmask(SIG_BLOCK, &s, NULL);
}

static int spawn(const BenchChild *ch, char **envp, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, ch->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawnattr_init(&at);
    sigset_t none, dfl = stop_signals();
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(pid, ch->exe, &fa, &at, ch->argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc) return df_fail("bench: cannot start %s: %s", ch->exe, strerror(rc));
    return 0;
}

/* Waits for pid; on SIGINT/SIGTERM stops it and sets *interrupted. Returns the wait status. */
static int wait_child(pid_t pid, int *interrupted) {
    sigset_t s = stop_signals();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) return status;
        int sig = plat_wait_signal(&s, 0.2); /* also polls, should a SIGCHLD be lost */
        if (sig == SIGINT || sig == SIGTERM) {
            *interrupted = 1;
            kill(pid, SIGTERM);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            return status;
        }
    }
}

/* The child's last non-empty stderr line (the error it died with), into out. Only the file's
 * tail is read: with K3_PROFILE a child's stderr can be large. */
static void last_line(const char *path, char *out, size_t cap) {
    char tail[4096];
    snprintf(out, cap, "(no message)");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    off_t end = lseek(fd, 0, SEEK_END), at = end > (off_t)sizeof tail - 1 ? end - (off_t)(sizeof tail - 1) : 0;
    ssize_t len = end > 0 ? pread(fd, tail, (size_t)(end - at), at) : 0;
    close(fd);
    if (len <= 0) return;
    while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r')) len--;
    tail[len] = 0;
    const char *line = strrchr(tail, '\n');
    line = line ? line + 1 : tail;
    if (!strncmp(line, "deltafin: ", 10)) line += 10;
    size_t n = strlen(line) < cap - 1 ? strlen(line) : cap - 1;
    if (n) memcpy(out, line, n), out[n] = 0;
}

static int child_failed(const BenchChild *ch, int status) {
    char msg[400];
    last_line(ch->err_path, msg, sizeof msg);
    if (WIFSIGNALED(status)) return df_fail("killed by signal %d: %s", WTERMSIG(status), msg);
    return df_fail("exit status %d: %s", WEXITSTATUS(status), msg);
}

json_t *bench_child_run(const BenchChild *ch, char **envp, int *interrupted) {
    pid_t pid;
    unlink(ch->json_path);
    if (spawn(ch, envp, &pid)) return NULL;
    int status = wait_child(pid, interrupted);
    if (*interrupted) return df_fail("interrupted"), NULL;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return child_failed(ch, status), NULL;
    json_error_t je;
    json_t *j = json_load_file(ch->json_path, 0, &je);
    if (!j) return df_fail("its --stats-json %s is unreadable: %s", ch->json_path, je.text), NULL;
    if (!json_is_array(json_object_get(j, "tokens")) || !json_is_string(json_object_get(json_object_get(j, "numerics"), "key"))) {
        json_decref(j);
        return df_fail("its --stats-json %s lacks tokens or numerics", ch->json_path), NULL;
    }
    return j;
}

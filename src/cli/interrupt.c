#include "cli/interrupt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t presses, exit_on_second;

static void on_sigint(int sig) {
    (void)sig;
    if (++presses >= 2 && exit_on_second) _exit(130);
}

void interrupt_install(int second_exits) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts a read at a prompt */
    sigemptyset(&sa.sa_mask);
    exit_on_second = second_exits;
    presses = 0;
    sigaction(SIGINT, &sa, NULL);
}

int interrupt_pending(void) { return presses > 0; }

void interrupt_clear(void) { presses = 0; }

int interrupt_cancel(void *ctx) {
    (void)ctx;
    return interrupt_pending();
}

/* interrupt.h - Ctrl-C for the commands that generate (run, chat).
 *
 * The SIGINT handler only counts: the decoding loop polls interrupt_cancel (a CancelFn) between
 * prefill chunks and before each token, so a generation stops cleanly and keeps what it produced.
 * The handler is installed without SA_RESTART, so a blocking read (chat's prompt) returns with
 * EINTR. With second_exits, a second Ctrl-C before interrupt_clear ends the process at once with
 * status 130 (for a generation that does not reach its next token soon). */
#ifndef DF_INTERRUPT_H
#define DF_INTERRUPT_H

void interrupt_install(int second_exits);
/* Nonzero once Ctrl-C was pressed since the last interrupt_clear. */
int interrupt_pending(void);
void interrupt_clear(void);
/* CancelFn (engine.h): interrupt_pending, ctx unused. */
int interrupt_cancel(void *ctx);

#endif

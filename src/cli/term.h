/* term.h - the terminal that generated text and status lines share.
 *
 * A status line (how far the prompt has been read, chat's thinking counter) is drawn on stderr
 * when stderr is a terminal, else on stdout when that is one, else nowhere; it is redrawn in place
 * and erased when it is done: it never stays among the generated text, and a pipe or a file
 * never receives one. On-demand expert fetches (fetch/progress.h) draw on stderr by the same rule. Text a command writes to the terminal goes through
 * term_write, which erases a status line first and remembers whether the cursor is in the middle
 * of a line, so that a status line drawn then starts on a line of its own instead of overwriting
 * the text. One thread at a time (the command's main thread) uses it. */
#ifndef DF_TERM_H
#define DF_TERM_H

#include <stddef.h>
#include <stdio.h>

/* Looks at stdout and stderr, and makes fetch progress share the terminal (transient: erased
 * when done). Call once before any output. */
void term_init(void);
/* 1 when status lines are shown (stderr or stdout is a terminal). */
int term_status_on(void);
/* Draws the status line (printf-style), replacing the previous one. */
void term_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Erases the status line if one is shown. */
void term_status_clear(void);
/* Writes n bytes of text to f (stdout or stderr) and flushes it, erasing the status line first
 * when f is on the terminal. */
void term_write(FILE *f, const void *p, size_t n);

/* Prefill progress for a status line: how many of a prompt's tokens are read, how fast, and how
 * long the rest will take. */
typedef struct {
    double t0, last;
    size_t base, total; /* tokens the State held at the start; tokens it will hold at the end */
    int started;
} PrefillMeter;

/* Starts metering a prompt of `total` tokens; `held` is what the session holds now. */
void prefill_meter_start(PrefillMeter *m, size_t held, size_t total);
/* Shows the progress when `held` tokens are in the State (at most every 0.1 s, from 0.3 s on). */
void prefill_meter_show(PrefillMeter *m, size_t held);
/* 1 when text was written to stdout through term_write and it ended with a line break. */
int term_out_line_ended(void);
/* Elapsed seconds as "4.2 s" or "1:23" into buf. */
const char *term_duration(char *buf, size_t n, double s);

/* The tool calls of a chat reply (xtml.h's array) from the (*shown)-th on, one line each on
 * stdout, "[tool call] NAME ARGUMENTS": run and chat run no tools, but say what the model asked
 * for instead of dropping it. *shown is advanced. */
struct json_t;
void term_tool_calls(const struct json_t *calls, size_t *shown);

/* The thinking of `run --chat` on stderr: dim on a terminal, and ended with a line break before
 * the answer (or the end), so that the two never run together. */
typedef struct {
    int open;  /* thinking was written and not ended yet */
} ThinkingOut;
void term_thinking(ThinkingOut *t, const char *text, size_t n);
void term_thinking_end(ThinkingOut *t);

#endif

/* chat_input.h - how chat reads the user's messages.
 *
 * On a terminal: libedit, with line editing (emacs keys, arrows), a history kept across sessions
 * in a file (saved after every message, mode 0600), and bracketed paste: text pasted at once is
 * one message however many lines it has (it stays in the line being edited until Enter sends it).
 * Otherwise (a pipe, a file): one message per line. Ctrl-C at the prompt discards the line. */
#ifndef DF_CHAT_INPUT_H
#define DF_CHAT_INPUT_H

#include "text/strbuf.h"

typedef struct LineReader LineReader;

/* A reader on stdin. edit: use libedit (stdin and stdout are a terminal). history_file: the history
 * file (its directory is created), or NULL for none. interrupted: says whether Ctrl-C was
 * pressed since the line was asked for (interrupt_pending). */
LineReader *line_reader_open(int edit, const char *history_file, int (*interrupted)(void));
/* Reads one message into line (without its final newline). Returns 1, 0 at the end of input, or
 * -1 when Ctrl-C discarded the line. */
int line_reader_get(LineReader *r, const char *prompt, StrBuf *line);
/* Adds a sent message to the history (and saves the file). */
void line_reader_remember(LineReader *r, const char *line);
void line_reader_close(LineReader *r);

#endif

/* progress.h - one progress display for long transfers: bytes, rate and ETA, redrawn in place on a
 * terminal (the line erased before each redraw) and printed as plain lines (every few seconds)
 * otherwise. Writes to stderr.
 *
 * A front end that writes other things to the same terminal says how to share it (progress_share,
 * process-wide, set once at start-up): claim runs before a display is first drawn on the terminal
 * (the front end ends the line of text the cursor is in, or gives up its own status line), and a
 * transient display (progress in the middle of generated text: on-demand expert fetches) is
 * erased when it finishes instead of leaving a closing line. */
#ifndef DF_PROGRESS_H
#define DF_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct {
    const char *what;
    uint64_t total;
    uint64_t saved;      /* of the bytes shown, those recorded durably (kept if interrupted) */
    int show_saved;
    double t0, last;
    int tty, drawn;
} Progress;

typedef struct {
    void (*claim)(void *ctx);
    void *ctx;
    int transient;
} ProgressShare;

/* The process's sharing rule (copied); NULL: none (the display owns the terminal). */
void progress_share(const ProgressShare *s);
void progress_start(Progress *p, const char *what, uint64_t total);
/* From now on the display also says how many of the bytes are saved: recorded durably, so an
 * interrupted transfer keeps them. */
void progress_saved(Progress *p, uint64_t saved);
/* Shows `done` bytes; final = 1 prints the closing line (erases the display when transient). */
void progress_show(Progress *p, uint64_t done, int final);
/* One line of its own on stderr ("deltafin: " and the text), the terminal claimed first as a
 * display's first draw claims it: a note among generated text starts on a line of its own. */
void progress_note(const char *fmt, ...) DF_PRINTF(1, 2);
/* "1.23 GB" style (decimal units) into buf. */
const char *fmt_bytes(char *buf, size_t len, uint64_t n);

#endif

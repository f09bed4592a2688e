/* progress.h - one progress display for long transfers: bytes, rate and ETA, redrawn in place on a
 * terminal and printed as plain lines (every few seconds) otherwise. Writes to stderr. */
#ifndef DF_PROGRESS_H
#define DF_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *what;
    uint64_t total;
    double t0, last;
    int tty;
} Progress;

void progress_start(Progress *p, const char *what, uint64_t total);
/* Shows `done` bytes; final = 1 prints the closing line. */
void progress_show(Progress *p, uint64_t done, int final);
/* "1.23 GB" style (decimal units) into buf. */
const char *fmt_bytes(char *buf, size_t len, uint64_t n);
double now_seconds(void);

#endif

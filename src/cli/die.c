#include "cli/die.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

_Noreturn void df_die(const char *fmt, ...) {
    char raw[4096], out[4096];
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    df_escape_controls(out, sizeof out, raw); /* one line, whatever an argument held */
    fprintf(stderr, "deltafin: %s\n", out);
    exit(1);
}

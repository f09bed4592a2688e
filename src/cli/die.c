#include "cli/die.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

_Noreturn void df_die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("deltafin: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

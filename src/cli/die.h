/* die.h - how a command ends on an error: the one place (with main) that exits the process. The
 * library below reports errors through util/err.h and returns. */
#ifndef DF_DIE_H
#define DF_DIE_H

#include "util/err.h"

/* Prints "deltafin: msg" to stderr (after flushing stdout) and exits with status 1. */
_Noreturn void df_die(const char *fmt, ...) DF_PRINTF(1, 2);

#endif

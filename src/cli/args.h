/* args.h - the small option parser every command uses.
 *
 * Options are "--name value" or "--name=value" or boolean "--name". Each command declares its
 * options in a table; unknown options, missing values and bad numbers are errors that name the
 * option. Positional arguments are collected in order. */
#ifndef DF_ARGS_H
#define DF_ARGS_H

#include <stdint.h>

typedef enum { ARG_FLAG, ARG_STR, ARG_INT, ARG_DOUBLE } ArgType;

typedef struct {
    const char *name;      /* without the leading "--" */
    ArgType type;
    void *out;             /* int* for FLAG/INT (INT as int64_t*), const char** for STR, double* */
    const char *help;
} ArgSpec;

/* Parses argv[1..argc) (argv[0] is the command name). Positionals go to pos (up to max_pos).
 * Returns 0, or -1 with a message. "--help"/"-h" prints usage and exits 0. */
int args_parse(int argc, char **argv, const ArgSpec *specs, int n_specs, const char **pos,
               int max_pos, int *n_pos, const char *usage);

#endif

/* opts.h - the command line of every command, on getopt_long.
 *
 * A command declares its own options in a table and calls cli_parse once. Every row of the
 * settings table is an option of every command as well (settings.h: --threads/-t for K3_THREADS,
 * --ctx-size/-c for K3_CONTEXT, --model/-m for DELTAFIN_ROOT, ...): its value goes through
 * settings_set, the one validation path, and overrides the environment variable. Short options
 * follow llama.cpp where they mean the same (-m -p -n -t -c). GNU conventions: options and
 * arguments in any order, "--name=value" or "--name value", a unique prefix of a long name, "--"
 * ends the options. A boolean setting is "--name" (1), "--name=0|1" or "--no-name".
 *
 * -h/--help prints the command's help (cli_print_help) and --version the version; both exit 0.
 * A usage error (unknown option, missing or bad value, unexpected argument) exits 2 with one
 * line naming the option and, when a known spelling is close, "did you mean ...?". */
#ifndef DF_OPTS_H
#define DF_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "cli/settings.h"

typedef enum {
    OPT_FLAG,   /* int *: set to 1 */
    OPT_STR,    /* const char **: the argument (borrowed from argv) */
    OPT_INT,    /* int64_t *: a whole number, in [lo, hi] when lo < hi */
    OPT_DOUBLE, /* double *: a finite number */
    OPT_LIST,   /* CliList *: every value given, in order (a repeatable option) */
} OptType;

typedef struct {
    const char *name;  /* long name, without "--" */
    char short_name;   /* or 0 */
    OptType type;
    void *out;
    const char *arg;   /* what the value is, for help: "DIR", "N" (NULL for OPT_FLAG) */
    const char *help;
    long long lo, hi;  /* OPT_INT's range */
    const char *alias; /* another long spelling that is accepted (llama.cpp's --n-predict), or NULL */
} CliOpt;

/* Table rows: CLI_FLAG("stats", 0, &stats, "help"), CLI_INT("max-new", 'n', &n, "N", "help", 0, 100). */
#define CLI_FLAG(name, sh, out, help) {name, sh, OPT_FLAG, out, NULL, help, 0, 0, NULL}
#define CLI_STR(name, sh, out, arg, help) {name, sh, OPT_STR, out, arg, help, 0, 0, NULL}
#define CLI_INT(name, sh, out, arg, help, lo, hi) {name, sh, OPT_INT, out, arg, help, lo, hi, NULL}
#define CLI_INT_ALIAS(name, sh, out, arg, help, lo, hi, alias) {name, sh, OPT_INT, out, arg, help, lo, hi, alias}
#define CLI_DOUBLE(name, sh, out, arg, help) {name, sh, OPT_DOUBLE, out, arg, help, 0, 0, NULL}
#define CLI_LIST(name, sh, out, arg, help) {name, sh, OPT_LIST, out, arg, help, 0, 0, NULL}

#define CLI_N(opts) ((int)(sizeof opts / sizeof opts[0]))

typedef struct {
    const char **v;    /* owned array (cli_list_free); the strings are argv's */
    int n;
} CliList;

typedef struct {
    const char *name;  /* as typed: "run", "convert-spine" */
    const char *args;  /* the synopsis after the name */
    const char *about; /* what the command does, one paragraph */
    const CliOpt *opts;
    int n_opts;
    int max_pos;       /* positional arguments it takes */
    const char *pos_name; /* what they are ("DIR"), for messages; NULL when it takes none */
    int program;       /* 1: a program of its own (tools/), not a deltafin command */
} CliCommand;

/* Parses argv[1..argc) (argv[0] is the command word). Setting options go into set (NULL: a
 * program without settings, which then has none); positionals into pos[0..max_pos) with their
 * count in *n_pos (both may be NULL when max_pos is 0). Returns only when everything parsed. */
void cli_parse(const CliCommand *cmd, Settings *set, int argc, char **argv, const char **pos, int *n_pos);

void cli_list_free(CliList *l);

/* A usage error of cmd: "deltafin: NAME: message (deltafin help NAME)" on stderr, exit 2. */
_Noreturn void cli_usage_error(const CliCommand *cmd, const char *fmt, ...) DF_PRINTF(2, 3);

/* The command's help: synopsis, what it does, its options, the settings' short forms. */
void cli_print_help(const CliCommand *cmd, FILE *f);
/* Prints text wrapped to `width` columns, every line after the first indented by `indent`. */
void cli_wrap(FILE *f, const char *text, int indent, int first_col, int width);

/* The closest of names[0..n) to typed (case-insensitive edit distance, a transposition counts
 * one), or NULL when none is close enough to be a likely typo. */
const char *cli_suggest(const char *typed, const char *const *names, int n);

/* `--version`: the version, the git revision it was built from, the build flavour, the kernels
 * this binary has and this CPU runs, and whether the CUDA device is built in. */
void cli_print_version(FILE *f);

#endif

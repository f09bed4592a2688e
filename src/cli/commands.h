/* commands.h - the list of subcommands. Each is `int cmd_NAME(Settings *set, int argc, char
 * **argv)` in src/cli/NAME.c (settings and help: beside their tables): it gets the settings main()
 * read from the environment, parses its own options with cli_parse (opts.h), which also applies
 * the setting options given, returns the process exit status and reports errors through
 * util/err.h. */
#ifndef DF_COMMANDS_H
#define DF_COMMANDS_H

#include <stdio.h>

#include "cli/settings.h"

/* X(name, summary) */
#define DF_COMMANDS(X)                                                                   \
    X(run, "generate from a prompt, printing the text as it is produced")               \
    X(chat, "interactive multi-turn chat in the terminal")                                \
    X(serve, "OpenAI-compatible HTTP server")                                            \
    X(setup, "install K3 from Hugging Face or a mirror (full or streaming)")             \
    X(fetch, "complete a streaming install (all missing experts or some layers)")        \
    X(warm, "fetch the missing experts router traces use most")                         \
    X(doctor, "read-only health check of an install")                                    \
    X(inspect, "summarise and validate a checkpoint")                                   \
    X(logits, "write fp32 logits [T, vocab] of a token sequence")                        \
    X(nll, "average negative log-likelihood of a token sequence")                         \
    X(bench, "benchmark configurations against each other, checking every run's tokens") \
    X(convert_spine, "write the int8 spine beside a checkpoint (K3_SPINE=int8, lossy)")    \
    X(tokenize, "print the token ids of text on stdin or of a rendered chat")            \
    X(detokenize, "print the text of token ids read on stdin")                          \
    X(synth, "write a random-weight checkpoint in the exact K3 layout")                  \
    X(settings, "list every setting (option and environment variable) with its value")   \
    X(help, "help on a command (deltafin help COMMAND) or on the settings")

#define DF_DECLARE(name, summary) int cmd_##name(Settings *set, int argc, char **argv);
DF_COMMANDS(DF_DECLARE)
#undef DF_DECLARE

typedef struct {
    const char *name;    /* the C name: '_' where the typed name has '-' */
    int (*fn)(Settings *, int, char **);
    const char *summary;
} Command;

/* The command typed as `typed` ("convert-spine"), or NULL. */
const Command *cli_find_command(const char *typed);
/* The typed name of a command ("convert-spine") into buf. */
const char *cli_command_name(const Command *c, char *buf, size_t n);
/* Every command, for listing and suggestions; *n gets the count. */
const Command *cli_commands(int *n);
/* `deltafin` without a command, and `deltafin --help`: the commands and where to go next. */
void cli_print_usage(FILE *f);
/* An unknown command word: exits 2 with a line naming it and the closest command. */
_Noreturn void cli_unknown_command(const char *typed);

#endif

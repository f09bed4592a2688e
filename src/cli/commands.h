/* commands.h - the list of subcommands. Each is `int cmd_NAME(const Settings *set, int argc,
 * char **argv)` in src/cli/NAME.c (settings: beside the table in settings.c): it gets the settings main() parsed from the environment,
 * returns the process exit status, and reports errors through util/err.h. */
#ifndef DF_COMMANDS_H
#define DF_COMMANDS_H

#include "cli/settings.h"

/* X(name, summary) */
#define DF_COMMANDS(X)                                                                   \
    X(synth, "write a random-weight checkpoint in the exact K3 layout")                  \
    X(inspect, "summarise and validate a checkpoint")                                   \
    X(logits, "write fp32 logits [T, vocab] of a token sequence")                        \
    X(run, "generate greedily from a prompt")                                            \
    X(nll, "average negative log-likelihood of a token sequence")                         \
    X(convert_spine, "write the int8 spine beside a checkpoint (K3_SPINE=int8, lossy)")    \
    X(tokenize, "print the token ids of text on stdin or of a rendered chat")            \
    X(detokenize, "print the text of token ids read on stdin")                          \
    X(setup, "install K3 from Hugging Face or a mirror (full or streaming)")             \
    X(fetch, "complete a streaming install (all missing experts or some layers)")        \
    X(warm, "fetch the missing experts router traces use most")                         \
    X(doctor, "read-only health check of an install")                            \
    X(chat, "interactive multi-turn chat in the terminal")                                \
    X(serve, "OpenAI-compatible HTTP server")                                            \
    X(bench, "benchmark configurations against each other, checking every run's tokens") \
    X(settings, "list every setting (environment variable) with its value, default and meaning")

#define DF_DECLARE(name, summary) int cmd_##name(const Settings *set, int argc, char **argv);
DF_COMMANDS(DF_DECLARE)
#undef DF_DECLARE

#endif

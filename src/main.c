/* deltafin - one binary, git-style subcommands. This file only dispatches (src/cli/commands.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/opts.h"
#include "util/err.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_print_usage(stderr);
        return 2;
    }
    const char *word = argv[1];
    if (!strcmp(word, "--help") || !strcmp(word, "-h")) {
        cli_print_usage(stdout);
        return 0;
    }
    if (!strcmp(word, "--version")) {
        cli_print_version(stdout);
        return 0;
    }
    const Command *c = cli_find_command(word);
    if (!c) cli_unknown_command(word);
    Settings set; /* every setting, validated before any command runs; the command's options refine it */
    if (settings_from_env(&set)) df_die("%s", df_errmsg());
    return c->fn(&set, argc - 1, argv + 1);
}

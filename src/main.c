/* deltafin - one binary, git-style subcommands. This file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "util/err.h"

typedef struct {
    const char *name;
    int (*fn)(const Settings *, int, char **);
    const char *summary;
} Command;

#define DF_ENTRY(name, summary) {#name, cmd_##name, summary},
static const Command commands[] = {DF_COMMANDS(DF_ENTRY)};
#undef DF_ENTRY

/* A command's C name spells '-' as '_' (convert_spine is typed convert-spine). */
static int name_is(const char *name, const char *typed) {
    for (; *name && *typed; name++, typed++)
        if (*typed != (*name == '_' ? '-' : *name)) return 0;
    return !*name && !*typed;
}

static void usage(FILE *f) {
    fprintf(f, "usage: deltafin COMMAND [options]   (deltafin COMMAND --help for options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char typed[32];
        snprintf(typed, sizeof typed, "%s", commands[i].name);
        for (char *p = typed; *p; p++) *p = *p == '_' ? '-' : *p;
        fprintf(f, "  %-14s %s\n", typed, commands[i].summary);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (name_is(commands[i].name, argv[1])) {
            Settings set; /* every setting, validated before any command runs */
            if (settings_from_env(&set)) df_die("%s", df_errmsg());
            return commands[i].fn(&set, argc - 1, argv + 1);
        }
    fprintf(stderr, "deltafin: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

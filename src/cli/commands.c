/* commands.c - the command table, the top-level usage and `deltafin help`. */
#include "cli/commands.h"

#include <stdlib.h>
#include <string.h>

#include "cli/opts.h"

#define DF_ENTRY(name, summary) {#name, cmd_##name, summary},
static const Command commands[] = {DF_COMMANDS(DF_ENTRY)};
#undef DF_ENTRY
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

const Command *cli_commands(int *n) {
    *n = N_COMMANDS;
    return commands;
}

const char *cli_command_name(const Command *c, char *buf, size_t n) {
    snprintf(buf, n, "%s", c->name);
    for (char *p = buf; *p; p++) *p = *p == '_' ? '-' : *p;
    return buf;
}

const Command *cli_find_command(const char *typed) {
    char name[32];
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cli_command_name(&commands[i], name, sizeof name), typed)) return &commands[i];
    return NULL;
}

void cli_print_usage(FILE *f) {
    fprintf(f, "usage: deltafin COMMAND [options]      (deltafin help COMMAND: its options)\n\n");
    cli_wrap(f,
             "Runs Moonshot's Kimi K3 exactly (fp32, greedy) on a machine whose RAM is a fraction of the model, "
             "streaming the experts each token needs from disk or a Hugging Face mirror.",
             0, 0, 100);
    fprintf(f, "\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        char name[32];
        fprintf(f, "  %-16s%s\n", cli_command_name(&commands[i], name, sizeof name), commands[i].summary);
    }
    fprintf(f, "\nmodel:\n");
    cli_wrap(f,
             "  -m/--model DIR, else DELTAFIN_ROOT, else the install in $XDG_CACHE_HOME/deltafin (~/.cache/deltafin: "
             "deltafin setup puts K3 there), else the bundled k3-mini model.",
             2, 0, 100);
    fprintf(f, "\nsettings:\n");
    cli_wrap(f,
             "  Every setting is an option of every command and an environment variable (-t/--threads N or "
             "DELTAFIN_THREADS, -c/--ctx-size N or DELTAFIN_CONTEXT, ...): deltafin help settings.",
             2, 0, 100);
    fprintf(f, "\nother:\n      --version               the version and how this binary was built\n");
}

_Noreturn void cli_unknown_command(const char *typed) {
    const char *names[N_COMMANDS + 1];
    char buf[N_COMMANDS][32];
    for (int i = 0; i < N_COMMANDS; i++) names[i] = cli_command_name(&commands[i], buf[i], sizeof buf[i]);
    const char *s = cli_suggest(typed, names, N_COMMANDS);
    fflush(stdout);
    if (typed[0] == '-')
        fprintf(stderr, "deltafin: '%s': options come after the command (deltafin COMMAND [options]; deltafin help)\n", typed);
    else if (s)
        fprintf(stderr, "deltafin: unknown command '%s' (did you mean %s?); deltafin help lists them\n", typed, s);
    else
        fprintf(stderr, "deltafin: unknown command '%s'; deltafin help lists them\n", typed);
    exit(2);
}

int cmd_help(Settings *set, int argc, char **argv) {
    static const CliCommand cmd = {"help", "[COMMAND | settings]",
                                   "Help on a command (the same as deltafin COMMAND --help; `deltafin help settings` "
                                   "lists every setting with its option), or, without an argument, the list of commands.",
                                   NULL, 0, 1, "COMMAND", 0};
    const char *pos[1];
    int n_pos;
    cli_parse(&cmd, NULL, argc, argv, pos, &n_pos);
    if (n_pos == 0) {
        cli_print_usage(stdout);
        return 0;
    }
    if (!strcmp(pos[0], "help")) {
        cli_print_help(&cmd, stdout);
        return 0;
    }
    const Command *c = cli_find_command(pos[0]);
    if (!c) cli_unknown_command(pos[0]);
    char *args[] = {(char *)pos[0], "--help", NULL};
    return c->fn(set, 2, args); /* prints the help and exits 0 */
}

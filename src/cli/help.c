/* help.c - what -h/--help, `deltafin help` and --version print (opts.h). The man page and the
 * bash completion are made from this text (scripts/manpage.sh, scripts/deltafin.bash), so its
 * shape is regular: "usage: ..." first, then sections whose title ends with ':' at the start of a
 * line, options as "  -x, --name ARG" with their help from column HELP_COL. */
#include <stdio.h>
#include <string.h>

#include "build_info.h"
#include "cli/opts.h"
#include "kernels/kernels.h"
#include "util/platform.h"

#define WIDTH 100
#define HELP_COL 30

void cli_wrap(FILE *f, const char *text, int indent, int first_col, int width) {
    int col = first_col, fresh = 1; /* fresh: nothing written on this line yet */
    for (const char *p = text; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        if (*p == '\n') { /* a line break the text asks for */
            fprintf(f, "\n%*s", indent, "");
            col = indent, fresh = 1, p++;
            continue;
        }
        size_t word = strcspn(p, " \n");
        if (!fresh && col + 1 + (int)word > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent, fresh = 1;
        }
        if (!fresh) fputc(' ', f), col++;
        fwrite(p, 1, word, f);
        col += (int)word, p += word, fresh = 0;
    }
    fputc('\n', f);
}

/* "  -m, --model DIR" padded to HELP_COL, then the help wrapped under it. */
static void option_line(FILE *f, char short_name, const char *name, const char *arg, const char *help) {
    char head[160];
    int n = snprintf(head, sizeof head, "  %c%c%s--%s%s%s", short_name ? '-' : ' ', short_name ? short_name : ' ',
                     short_name ? ", " : "  ", name, arg ? " " : "", arg ? arg : "");
    fputs(head, f);
    if (n >= HELP_COL - 1) {
        fprintf(f, "\n%*s", HELP_COL, "");
    } else {
        fprintf(f, "%*s", HELP_COL - n, "");
    }
    cli_wrap(f, help, HELP_COL, HELP_COL, WIDTH);
}

/* What a setting's value looks like: its arg, its choices, or from its kind. */
static const char *setting_arg(const Setting *row, char *buf, size_t n) {
    if (row->arg) return row->arg;
    switch (row->kind) {
    case SET_INT:
    case SET_INT64: return "N";
    case SET_GB: return "GB";
    case SET_BOOL: return "[=0|1]";
    case SET_TEXT: return "VALUE";
    case SET_CHOICE: break;
    }
    buf[0] = 0;
    for (const SettingChoice *c = row->choices; c->name; c++) {
        size_t at = strlen(buf);
        snprintf(buf + at, n - at, "%s%s", at ? "|" : "", c->name);
    }
    return buf;
}

static void setting_line(FILE *f, const Setting *row) {
    char arg[96], help[640], name[64];
    const char *a = setting_arg(row, arg, sizeof arg);
    snprintf(name, sizeof name, "%s%s", row->kind == SET_BOOL ? "[no-]" : "", row->flag);
    snprintf(help, sizeof help, "%s: %s (default: %s)%s%s%s", settings_var(row), row->help, row->def ? row->def : row->def_text,
             row->alias ? "; also --" : "", row->alias ? row->alias : "", "");
    option_line(f, row->short_flag, name, row->kind == SET_BOOL ? NULL : a, help);
}

static void print_all_settings(FILE *f);

/* The settings each command uses, by their option names: its help lists them after its own
 * options (every other setting is an option of it too, listed by `deltafin help settings`). */
#define SETTINGS_MODEL "model quiet verbose"
#define SETTINGS_COMPUTE SETTINGS_MODEL " threads ctx-size device ram-gb store spine spec moe-top-k"
#define SETTINGS_INSTALL "model quiet hf-host hf-path hf-revision hf-token offline fetch-parallel fetch-retries"
static const struct {
    const char *command, *settings;
} command_settings_table[] = {
    {"run", SETTINGS_COMPUTE " effort"},
    {"chat", SETTINGS_COMPUTE " effort"},
    {"serve", SETTINGS_COMPUTE " effort api-key server-max-tokens memo-entries prompt-snapshot"},
    {"bench", SETTINGS_COMPUTE " tmpdir"},
    {"logits", SETTINGS_COMPUTE},
    {"nll", SETTINGS_COMPUTE},
    {"setup", SETTINGS_INSTALL " disk-free-bytes"},
    {"fetch", SETTINGS_INSTALL},
    {"warm", SETTINGS_INSTALL},
    {"doctor", SETTINGS_MODEL},
    {"convert-spine", SETTINGS_MODEL " threads"},
};

static const char *command_settings(const char *command) {
    for (size_t i = 0; i < sizeof command_settings_table / sizeof *command_settings_table; i++)
        if (!strcmp(command_settings_table[i].command, command)) return command_settings_table[i].settings;
    return SETTINGS_MODEL;
}

void cli_print_help(const CliCommand *cmd, FILE *f) {
    fprintf(f, "usage: %s%s %s\n\n", cmd->program ? "" : "deltafin ", cmd->name, cmd->args);
    cli_wrap(f, cmd->about, 0, 0, WIDTH);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < cmd->n_opts; i++) {
        const CliOpt *o = &cmd->opts[i];
        char help[640];
        snprintf(help, sizeof help, "%s%s%s%s%s", o->help, o->type == OPT_LIST ? " (repeatable)" : "",
                 o->alias ? " (also --" : "", o->alias ? o->alias : "", o->alias ? ")" : "");
        option_line(f, o->short_name, o->name, o->type == OPT_FLAG ? NULL : o->arg, help);
    }
    option_line(f, 'h', "help", NULL, "this help");
    option_line(f, 0, "version", NULL, "the version and how this binary was built");
    if (cmd->program) return;
    size_t n;
    const Setting *rows = settings_table(&n);
    if (!strcmp(cmd->name, "settings")) { /* the settings command's help is about all of them */
        fprintf(f, "\n");
        print_all_settings(f);
        return;
    }
    fprintf(f, "\nsettings it uses (each overrides its environment variable):\n");
    const char *names = command_settings(cmd->name);
    int listed = 0, others = 0;
    for (const char *p = names; *p;) {
        size_t len = strcspn(p, " ");
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)(len < 63 ? len : 63), p);
        const Setting *row = settings_find_flag(flag);
        if (row) setting_line(f, row), listed++;
        p += len + (p[len] == ' ');
    }
    for (size_t i = 0; i < n; i++) others += rows[i].flag != NULL;
    char rest[240];
    snprintf(rest, sizeof rest,
             "Every setting is an option of every command: the other %d are in deltafin help settings. llama.cpp's "
             "-ngl N (--n-gpu-layers) is one too: 0 the CPU, more the GPU.",
             others - listed);
    fputs("  ", f);
    cli_wrap(f, rest, 2, 2, WIDTH);
}

static void print_all_settings(FILE *f) {
    size_t n;
    const Setting *rows = settings_table(&n);
    cli_wrap(f,
             "Every setting is an environment variable and an option of every command; the option overrides the "
             "variable. Each value is checked when deltafin starts, whatever the command: a bad one stops it with one "
             "line naming the option or variable. `deltafin settings` prints the values in effect.",
             0, 0, WIDTH);
    fprintf(f, "\nsettings:\n");
    for (size_t i = 0; i < n; i++)
        if (rows[i].flag) setting_line(f, &rows[i]);
    fprintf(f, "\nenvironment only:\n");
    for (size_t i = 0; i < n; i++)
        if (!rows[i].flag) {
            fprintf(f, "  %-*s", HELP_COL - 2, settings_var(&rows[i]));
            char help[640];
            snprintf(help, sizeof help, "%s (default: %s)", rows[i].help, rows[i].def ? rows[i].def : rows[i].def_text);
            cli_wrap(f, help, HELP_COL, HELP_COL, WIDTH);
        }
}

void cli_print_version(FILE *f) {
    char kernels[160];
    kern_describe(kernels, sizeof kernels);
    fprintf(f, "deltafin %s (%s)\n", DF_VERSION, DF_GIT_REV);
    fprintf(f, "build: %s, %s %s; kernels %s; CUDA: %s\n", DF_BUILD, plat_arch_name(), plat_os_name(), kernels,
#ifdef DF_CUDA
            "built in (DELTAFIN_DEV=auto uses a GPU when one answers)"
#else
            "not built in (make cuda)"
#endif
    );
}

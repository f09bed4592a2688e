/* opts.c - getopt_long over a command's own options plus every setting (opts.h). */
#include "cli/opts.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* One option getopt_long knows: a command's, a setting's (or its --no- form), or built in. */
typedef enum { KIND_CMD, KIND_SETTING, KIND_SETTING_OFF, KIND_HELP, KIND_VERSION, KIND_GPU_LAYERS } OptKind;

typedef struct {
    OptKind kind;
    const CliOpt *opt;     /* KIND_CMD */
    const Setting *row;    /* KIND_SETTING* */
    const char *name;      /* the long name this entry is (an alias has its own entry) */
} Entry;

#define VAL_BASE 1000

typedef struct {
    const CliCommand *cmd;
    Entry *e;
    struct option *lo;
    int n;
    char shorts[128];      /* getopt's optstring */
    int by_short[128];     /* entry index of each short option, -1: none */
    char **orig;           /* argv as given (getopt permutes argv); owned here, so that it stays
                              reachable when a usage error exits from inside the parse */
    int argc;
} Table;

/* ---- building the table ---- */

static void add(Table *t, OptKind kind, const CliOpt *opt, const Setting *row, const char *name, int has_arg) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].name, name)) { /* two meanings for one spelling: a programming error */
            fprintf(stderr, "deltafin: %s: option --%s is defined twice\n", t->cmd->name, name);
            abort();
        }
    t->e[t->n] = (Entry){kind, opt, row, name};
    t->lo[t->n] = (struct option){name, has_arg, NULL, VAL_BASE + t->n};
    t->n++;
}

static void add_short(Table *t, char c, int has_arg) {
    unsigned char u = (unsigned char)c;
    if (u >= 128 || t->by_short[u] >= 0) {
        fprintf(stderr, "deltafin: %s: option -%c is defined twice\n", t->cmd->name, c);
        abort();
    }
    t->by_short[u] = t->n - 1;
    size_t at = strlen(t->shorts);
    t->shorts[at++] = c;
    if (has_arg) t->shorts[at++] = ':';
    t->shorts[at] = 0;
}

static void add_setting(Table *t, const Setting *row) {
    int boolean = row->kind == SET_BOOL;
    add(t, KIND_SETTING, NULL, row, row->flag, boolean ? optional_argument : required_argument);
    if (row->short_flag) add_short(t, row->short_flag, !boolean);
    if (row->alias) add(t, KIND_SETTING, NULL, row, row->alias, boolean ? optional_argument : required_argument);
    if (boolean) {
        char *off = df_malloc(strlen(row->flag) + 4);
        sprintf(off, "no-%s", row->flag);
        add(t, KIND_SETTING_OFF, NULL, row, off, no_argument);
    }
}

static void table_build(Table *t, const CliCommand *cmd, int with_settings) {
    size_t n_rows = 0;
    const Setting *rows = settings_table(&n_rows);
    size_t cap = 2 * (size_t)cmd->n_opts + 3 * n_rows + 5;
    memset(t, 0, sizeof *t);
    t->cmd = cmd;
    t->e = df_calloc(cap, sizeof *t->e);
    t->lo = df_calloc(cap + 1, sizeof *t->lo);
    memset(t->by_short, -1, sizeof t->by_short);
    strcpy(t->shorts, ":"); /* ':' first: a missing value is reported as such */
    for (int i = 0; i < cmd->n_opts; i++) {
        const CliOpt *o = &cmd->opts[i];
        int has_arg = o->type == OPT_FLAG ? no_argument : required_argument;
        add(t, KIND_CMD, o, NULL, o->name, has_arg);
        if (o->short_name) add_short(t, o->short_name, has_arg);
        if (o->alias) add(t, KIND_CMD, o, NULL, o->alias, has_arg);
    }
    for (size_t i = 0; with_settings && i < n_rows; i++)
        if (rows[i].flag) add_setting(t, &rows[i]);
    if (with_settings) { /* llama.cpp's -ngl N (rewritten from its one-dash spelling: llama_words) */
        add(t, KIND_GPU_LAYERS, NULL, NULL, "n-gpu-layers", required_argument);
        add(t, KIND_GPU_LAYERS, NULL, NULL, "gpu-layers", required_argument);
    }
    add(t, KIND_HELP, NULL, NULL, "help", no_argument);
    add_short(t, 'h', 0);
    add(t, KIND_VERSION, NULL, NULL, "version", no_argument);
}

static void table_free(Table *t) {
    for (int i = 0; i < t->n; i++)
        if (t->e[i].kind == KIND_SETTING_OFF) free((char *)t->e[i].name);
    free(t->e), free(t->lo), free(t->orig);
}

/* ---- errors and suggestions ---- */

_Noreturn void cli_usage_error(const CliCommand *cmd, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, cmd->program ? "%s: " : "deltafin: %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, cmd->program ? " (%s --help)\n" : " (deltafin help %s)\n", cmd->name);
    exit(2);
}

/* Optimal string alignment distance, case-insensitive; stops counting above 9. */
static int distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 40 || nb > 40) return 99;
    int d[41][41];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + !same;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

const char *cli_suggest(const char *typed, const char *const *names, int n) {
    const char *best = NULL;
    int best_d = 99;
    size_t len = strlen(typed);
    for (int i = 0; i < n; i++) {
        int d = distance(typed, names[i]);
        if (d < best_d) best_d = d, best = names[i];
    }
    /* one edit in a short word, two in a longer one, three in a long one */
    int allowed = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    return best && best_d <= allowed ? best : NULL;
}

/* The long names of the table, for suggestions. */
static const char *suggest_option(const Table *t, const char *typed) {
    const char **names = df_malloc(sizeof *names * (size_t)t->n);
    for (int i = 0; i < t->n; i++) names[i] = t->e[i].name;
    const char *s = cli_suggest(typed, names, t->n);
    free(names);
    return s;
}

/* "--mdoel=x": unknown (with the closest spelling), ambiguous, or a variable's name. */
_Noreturn static void unknown_long(const Table *t, const char *arg) {
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    char typed[64];
    snprintf(typed, sizeof typed, "%.*s", (int)(len < 63 ? len : 63), name);
    const Setting *row = settings_find(typed);
    if (row && row->flag) cli_usage_error(t->cmd, "%s is an environment variable; its option is --%s", typed, row->flag);
    char matches[256] = "";
    int n_match = 0;
    for (int i = 0; i < t->n; i++)
        if (len && !strncmp(t->e[i].name, typed, len) && strlen(matches) + strlen(t->e[i].name) + 4 < sizeof matches) {
            strcat(matches, n_match++ ? ", --" : "--");
            strcat(matches, t->e[i].name);
        }
    if (n_match > 1) cli_usage_error(t->cmd, "option --%s is ambiguous: %s", typed, matches);
    const char *s = suggest_option(t, typed);
    if (s) cli_usage_error(t->cmd, "unknown option --%s (did you mean --%s?)", typed, s);
    cli_usage_error(t->cmd, "unknown option --%s", typed);
}

static const char *entry_display(const Entry *e, char *buf, size_t n) {
    snprintf(buf, n, "--%s", e->name);
    return buf;
}

/* ---- values ---- */

static void set_cmd_value(const Table *t, const Entry *e, const char *v) {
    const CliOpt *o = e->opt;
    char *end;
    errno = 0;
    switch (o->type) {
    case OPT_FLAG: *(int *)o->out = 1; return;
    case OPT_STR: *(const char **)o->out = v; return;
    case OPT_LIST: {
        CliList *l = o->out;
        l->v = df_realloc(l->v, sizeof *l->v * (size_t)(l->n + 1));
        l->v[l->n++] = v;
        return;
    }
    case OPT_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) cli_usage_error(t->cmd, "--%s: '%s' is not a whole number", e->name, v);
        if (o->lo < o->hi && (x < o->lo || x > o->hi))
            cli_usage_error(t->cmd, "--%s: %lld is not in %lld..%lld", e->name, x, o->lo, o->hi);
        *(int64_t *)o->out = x;
        return;
    }
    case OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x)) cli_usage_error(t->cmd, "--%s: '%s' is not a number", e->name, v);
        *(double *)o->out = x;
        return;
    }
    }
}

static void set_setting(const Table *t, Settings *set, const Entry *e, const char *v, char short_name) {
    static char origins[SETTINGS_MAX][72]; /* Settings keep the origin's name: the last option per row */
    size_t n_rows;
    char *origin = origins[e->row - settings_table(&n_rows)];
    if (short_name) snprintf(origin, sizeof origins[0], "-%c", short_name);
    else snprintf(origin, sizeof origins[0], "--%s", e->name);
    if (e->kind == KIND_SETTING_OFF) v = "0";
    else if (e->row->kind == SET_BOOL && !v) v = "1";
    if (!*v) cli_usage_error(t->cmd, "%s is empty: give a value, or leave the option out", origin);
    if (settings_set(set, e->row, v, origin)) cli_usage_error(t->cmd, "%s", df_errmsg());
}

/* -ngl N, llama.cpp's "layers on the GPU", as far as it applies here: the layer pass runs every
 * layer on the GPU or none, so 0 is the CPU and any other count the GPU (the whole pass). A build
 * without the CUDA backend runs on the CPU and says so (after parsing: -q may come later). */
static int gpu_layers_note;

static void gpu_layers(const Table *t, Settings *set, const Entry *e, const char *v) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 0) cli_usage_error(t->cmd, "--%s: '%s' is not a layer count (0: the CPU)", e->name, v);
    const Setting *dev = settings_find_flag("device");
#ifdef DF_CUDA
    const char *want = n ? "cuda" : "cpu";
#else
    const char *want = "cpu";
    gpu_layers_note = n > 0;
#endif
    if (settings_set(set, dev, want, "-ngl")) cli_usage_error(t->cmd, "%s", df_errmsg());
}

/* llama.cpp's options of one dash and several letters: getopt would read "-ngl 99" as "-n gl".
 * The ones that mean something here become their long spelling; the others get a hint. */
static const struct {
    const char *word, *long_name, *hint;
} llama_words[] = {
    {"-ngl", "--n-gpu-layers", NULL},
    {"-np", "--parallel", "llama.cpp's parallel slots are an option of deltafin serve: --parallel N"},
    {"-fa", NULL, "llama.cpp's flash attention: attention here is exact and takes no switch"},
    {"-cnv", NULL, "for a conversation use deltafin chat"},
    {"-sys", NULL, "a system message is deltafin chat --system TEXT"},
    {"-ctk", NULL, "llama.cpp's cache type: the MLA cache layout here is --mla-cache latent|expanded (exact either way)"},
    {"-ub", NULL, "llama.cpp's batch sizes: prompt positions per forward pass here are run --chunk N"},
};

static int has_option(const CliCommand *cmd, const char *name) {
    for (int i = 0; i < cmd->n_opts; i++)
        if (!strcmp(cmd->opts[i].name, name)) return 1;
    return 0;
}

static void rewrite_llama_words(const CliCommand *cmd, int with_settings, int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        for (size_t k = 0; k < sizeof llama_words / sizeof *llama_words; k++) {
            if (strcmp(argv[i], llama_words[k].word)) continue;
            const char *to = llama_words[k].long_name;
            int usable = to && (!strcmp(to, "--parallel") ? has_option(cmd, "parallel") : with_settings);
            if (!usable) cli_usage_error(cmd, "%s is not an option here (%s)", argv[i], llama_words[k].hint);
            argv[i] = (char *)to;
        }
}

/* ---- parsing ---- */

/* "-model": getopt reads -m with the value "odel"; a long name written with one dash is refused. */
static void check_single_dash(const Table *t, const char *arg) {
    for (int i = 0; i < t->n; i++) {
        size_t len = strlen(t->e[i].name);
        if (len > 2 && !strncmp(arg + 1, t->e[i].name, len) && (arg[1 + len] == 0 || arg[1 + len] == '='))
            cli_usage_error(t->cmd, "'%s': a long option takes two dashes (did you mean -%s?)", arg, arg);
    }
}

static void handle(const Table *t, Settings *set, int c, char **argv) {
    char buf[80];
    if (c == ':') { /* a missing value: optopt is the option's val */
        const Entry *e = optopt >= VAL_BASE                                           ? &t->e[optopt - VAL_BASE]
                         : optopt > 0 && optopt < 128 && t->by_short[optopt] >= 0 ? &t->e[t->by_short[optopt]]
                                                                                  : NULL;
        const char *what = e && e->opt ? e->opt->arg : NULL;
        if (e) cli_usage_error(t->cmd, "%s needs a value%s%s", entry_display(e, buf, sizeof buf), what ? ": " : "", what ? what : "");
        cli_usage_error(t->cmd, "-%c needs a value", optopt);
    }
    if (c == '?') {
        const char *arg = argv[optind - 1];
        if (optopt >= VAL_BASE) /* a value given to an option that takes none */
            cli_usage_error(t->cmd, "--%s takes no value", t->e[optopt - VAL_BASE].name);
        if (optopt) cli_usage_error(t->cmd, "unknown option -%c", optopt);
        unknown_long(t, arg);
    }
    int idx = c >= VAL_BASE ? c - VAL_BASE : c > 0 && c < 128 ? t->by_short[c] : -1;
    if (idx < 0) cli_usage_error(t->cmd, "cannot parse the options");
    const Entry *e = &t->e[idx];
    char short_name = c < VAL_BASE ? (char)c : 0;
    if (short_name && optarg && argv[optind - 1][0] == '-' && argv[optind - 1][1] == short_name && argv[optind - 1][2])
        check_single_dash(t, argv[optind - 1]);
    switch (e->kind) {
    case KIND_HELP:
        cli_print_help(t->cmd, stdout);
        exit(0);
    case KIND_VERSION:
        cli_print_version(stdout);
        exit(0);
    case KIND_CMD: set_cmd_value(t, e, optarg); return;
    case KIND_SETTING:
    case KIND_SETTING_OFF: set_setting(t, set, e, optarg, short_name); return;
    case KIND_GPU_LAYERS: gpu_layers(t, set, e, optarg); return;
    }
}

/* "--spec 0": a boolean option's value written as a separate argument is refused with how to
 * write it (a positional that is unexpected, or any 0 or 1 where a command takes positionals). */
static void check_bool_value(const Table *t, const char *arg, int any) {
    for (int i = 1; i < t->argc; i++)
        if (t->orig[i] == arg && i > 1 && !strncmp(t->orig[i - 1], "--", 2) && (any || !strcmp(arg, "0") || !strcmp(arg, "1"))) {
            const char *prev = t->orig[i - 1] + 2;
            for (int k = 0; k < t->n; k++)
                if (!strcmp(t->e[k].name, prev) && t->e[k].kind == KIND_SETTING && t->e[k].row->kind == SET_BOOL)
                    cli_usage_error(t->cmd, "unexpected argument '%s' (a value of --%s is written --%s=%s)", arg, prev,
                                    prev, arg);
        }
}

/* A positional argument that is not wanted: say what it looks like. */
_Noreturn static void unexpected(const Table *t, const char *arg) {
    check_bool_value(t, arg, 1);
    if (t->cmd->max_pos == 0) cli_usage_error(t->cmd, "unexpected argument '%s'", arg);
    cli_usage_error(t->cmd, "unexpected argument '%s' (it takes at most %d: %s)", arg, t->cmd->max_pos, t->cmd->pos_name);
}

void cli_parse(const CliCommand *cmd, Settings *set, int argc, char **argv, const char **pos, int *n_pos) {
    Table t;
    table_build(&t, cmd, set != NULL);
    rewrite_llama_words(cmd, set != NULL, argc, argv);
    gpu_layers_note = 0;
    t.orig = df_malloc(sizeof *t.orig * (size_t)(argc + 1));
    memcpy(t.orig, argv, sizeof *t.orig * (size_t)argc);
    t.argc = argc;
    opterr = 0;
    optind = 0; /* (GNU) a full restart of the scan */
    int c;
    while ((c = getopt_long(argc, argv, t.shorts, t.lo, NULL)) != -1) handle(&t, set, c, argv);
    int n = 0;
    for (int i = optind; i < argc; i++) {
        if (n >= cmd->max_pos) unexpected(&t, argv[i]);
        check_bool_value(&t, argv[i], 0);
        pos[n++] = argv[i];
    }
    if (n_pos) *n_pos = n;
    table_free(&t);
    if (gpu_layers_note && !set->quiet)
        fprintf(stderr, "deltafin: -ngl: this build has no GPU backend (make cuda builds one): running on the CPU\n");
}

void cli_list_free(CliList *l) {
    free(l->v);
    l->v = NULL, l->n = 0;
}

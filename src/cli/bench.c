/* deltafin bench - a reproducible benchmark of configurations against each other.
 *
 * Each --config is a set of environment overrides (the first is the baseline). Every run is a
 * fresh `deltafin run` child, because settings are read when the model opens. Runs interleave:
 * round r runs every configuration once, in order, so machine noise falls on all alike. Every
 * run is checked: runs whose numerics (spine format, experts per token, A_log indexing) match
 * must generate exactly the same tokens, whatever else differs (threads, store, speculation,
 * prefetch); a configuration with other numerics than the baseline's (K3_SPINE=int8,
 * K3_MOE_TOP_K below the model's) is lossy: its runs must agree with each other, and the report
 * says how many tokens differ from the baseline. Then one row per configuration: median and
 * range of decode s/token and prefill tokens/s, ratio to the baseline, MB read per token. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/opts.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/platform.h"

extern char **environ;

typedef struct {
    const char *model, *tokens, *text, *json;
    int64_t max_new, runs, chunk;
    int chat, warmup;
    CliList configs;
    char **base;             /* the children's environment before a configuration's overrides */
    size_t n_owned;          /* its first entries, made from the options (the rest are environ's) */
} BenchArgs;

/* The first token each group of equal numerics produced: runs with the same numerics compare to it. */
typedef struct {
    const char *key;
    json_t *tokens;
    const char *label;
} Reference;

/* The children's base environment: this one, with the settings given to bench as options
 * (--threads 2 is K3_THREADS=2 for every child; a configuration may still override it). */
static char **base_environment(const Settings *set, size_t *n_owned) {
    size_t n_env = 0, n_rows;
    while (environ[n_env]) n_env++;
    const Setting *rows = settings_table(&n_rows);
    char **env = df_malloc(sizeof *env * (n_env + n_rows + 1));
    size_t k = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const char *from = settings_origin(set, &rows[i]);
        if (!from || from[0] != '-') continue; /* only what the options set */
        char value[4096];
        settings_value_text(set, &rows[i], value, sizeof value);
        size_t len = strlen(settings_var(&rows[i])) + strlen(value) + 2;
        env[k] = df_malloc(len);
        snprintf(env[k++], len, "%s=%s", settings_var(&rows[i]), value);
    }
    size_t given = *n_owned = k;
    for (size_t i = 0; i < n_env; i++) { /* (either spelling of a variable an option replaced) */
        const Setting *row = settings_find_n(environ[i], strcspn(environ[i], "="));
        int replaced = 0;
        for (size_t j = 0; j < given && !replaced && row; j++) replaced = settings_find_n(env[j], strcspn(env[j], "=")) == row;
        if (!replaced) env[k++] = environ[i];
    }
    env[k] = NULL;
    return env;
}

static void free_base(BenchArgs *a) {
    for (size_t i = 0; i < a->n_owned; i++) free(a->base[i]);
    free(a->base);
}

static void parse_args(Settings *set, int argc, char **argv, BenchArgs *a) {
    memset(a, 0, sizeof *a);
    a->max_new = 16, a->runs = 3, a->chunk = 0;
    const CliOpt opts[] = {
        CLI_STR("prompt", 'p', &a->text, "TEXT", "the prompt as text"),
        CLI_STR("tokens", 0, &a->tokens, "IDS", "the prompt as token ids, space-separated"),
        CLI_FLAG("chat", 0, &a->chat, "render the prompt in K3's chat format (run --chat)"),
        CLI_INT_ALIAS("max-new", 'n', &a->max_new, "N", "tokens to generate per run (default 16; decode speed needs 2)", 2,
         1 << 24, "n-predict"),
        CLI_INT("runs", 0, &a->runs, "R", "measured runs per configuration (default 3)", 1, 1000),
        CLI_FLAG("warmup", 0, &a->warmup, "one unmeasured round first"),
        CLI_LIST("config", 0, &a->configs, "NAME=VALUE[,...]",
         "K3_*/DELTAFIN_* settings of one configuration; the first is the baseline"),
        CLI_INT("chunk", 0, &a->chunk, "N", "prompt positions per pass (default 0: the prefill window)", 0, MODEL_MAX_WINDOW),
        CLI_STR("json", 0, &a->json, "FILE", "also write the results as JSON to FILE"),
    };
    static const char about[] =
        "A reproducible benchmark: each --config runs as a fresh `deltafin run` child, rounds interleaved, and the "
        "run fails unless every run with the same numerics produced the same tokens (lossy configurations are "
        "labelled with how many tokens differ). One row per configuration: median and range of decode s/token and "
        "prefill tokens/s, the ratio to the baseline, MB read per token when streaming. Settings given as options "
        "apply to every configuration.";
    const CliCommand cmd = {"bench", "[options] (-p TEXT [--chat] | --tokens IDS) [--config NAME=VALUE[,...]]...",
                            about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!a->tokens == !a->text) cli_usage_error(&cmd, "give the prompt with exactly one of -p/--prompt and --tokens");
    if (a->chat && !a->text) cli_usage_error(&cmd, "--chat needs -p/--prompt");
    if (a->configs.n > BENCH_MAX_CONFIGS) cli_usage_error(&cmd, "at most %d --config", BENCH_MAX_CONFIGS);
    if (!a->configs.n) {
        a->configs.v = df_malloc(sizeof *a->configs.v);
        a->configs.v[a->configs.n++] = "";
    }
    a->model = set->root;
    a->base = base_environment(set, &a->n_owned);
}

/* run's argv for every child; the last two slots are --stats-json and its path. */
static char **child_argv(const BenchArgs *a, const char *exe, const char *json_path, char *num[2]) {
    char **v = df_malloc(sizeof *v * 16);
    int n = 0;
    snprintf(num[0], 24, "%lld", (long long)a->max_new);
    snprintf(num[1], 24, "%lld", (long long)a->chunk);
    v[n++] = (char *)exe, v[n++] = "run"; /* the model and every setting option: in the environment */
    if (a->tokens) v[n++] = "--tokens", v[n++] = (char *)a->tokens;
    if (a->text) v[n++] = "--prompt", v[n++] = (char *)a->text;
    if (a->chat) v[n++] = "--chat";
    v[n++] = "--max-new", v[n++] = num[0], v[n++] = "--chunk", v[n++] = num[1];
    v[n++] = "--stats-json", v[n++] = (char *)json_path;
    v[n] = NULL;
    return v;
}

/* Tokens that differ between two runs (position by position, plus the length difference);
 * *first: the first differing index, -1 if none. */
static int token_diff(const json_t *x, const json_t *y, int *first) {
    size_t nx = json_array_size(x), ny = json_array_size(y), n = nx < ny ? nx : ny;
    int d = 0;
    *first = -1;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(x, i)) != json_integer_value(json_array_get(y, i)))
            if (d++ == 0) *first = (int)i;
    if (nx != ny && *first < 0) *first = (int)n;
    return d + (int)(nx > ny ? nx - ny : ny - nx);
}

/* Checks a measured run against the reference for its numerics (making it the reference if it is
 * the first with them) and, for a configuration's first run, records how it compares with the
 * baseline. Fails naming the configuration and run. */
static int check_run(BenchConfig *cs, int i, int round, json_t *run, Reference *refs, int *n_refs) {
    BenchConfig *c = &cs[i];
    const char *key = json_string_value(json_object_get(json_object_get(run, "numerics"), "key"));
    json_t *tokens = json_object_get(run, "tokens");
    Reference *r = NULL;
    for (int k = 0; k < *n_refs && !r; k++)
        if (!strcmp(refs[k].key, key)) r = &refs[k];
    if (!r) {
        r = &refs[(*n_refs)++];
        r->key = key, r->tokens = tokens, r->label = c->label;
    }
    int first, d = token_diff(r->tokens, tokens, &first);
    if (d)
        return df_fail("bench: config '%s' run %d generated tokens that differ from config '%s' run 1 with the same "
                       "numerics (%s): %zu tokens against %zu, %d differ, the first at index %d; only the numerics may "
                       "change the tokens",
                       c->label, round, r->label, key, json_array_size(tokens), json_array_size(r->tokens), d, first);
    if (c->tokens) return 0;
    c->tokens = tokens, c->numerics = key;
    c->lossy = strcmp(key, refs[0].key) != 0;
    c->differ = token_diff(refs[0].tokens, tokens, &c->first_diff);
    return 0;
}

static void progress(const BenchConfig *c, int round, int rounds, int warm, const json_t *run) {
    char spt[32], tps[32], pre[32];
    bench_fmt(spt, sizeof spt, json_number_value(json_object_get(run, "s_per_token")));
    bench_fmt(tps, sizeof tps, json_number_value(json_object_get(run, "tokens_per_s")));
    bench_fmt(pre, sizeof pre, json_number_value(json_object_get(run, "prefill_tokens_per_s")));
    fprintf(stderr, "bench: %s %d/%d %s: %s s/token (%s tok/s), prefill %s tok/s\n", warm ? "warm-up" : "round", round,
            rounds, c->label, spt, tps, pre);
}

/* Every round, interleaved. Returns 0, -1 with a message, or 130 when interrupted. */
static int measure(const BenchArgs *a, BenchConfig *cs, const BenchChild *ch) {
    Reference refs[BENCH_MAX_CONFIGS];
    int n_refs = 0, rounds = (int)a->runs;
    for (int round = a->warmup ? 0 : 1; round <= rounds; round++)
        for (int i = 0; i < a->configs.n; i++) {
            int interrupted = 0;
            json_t *run = bench_child_run(ch, cs[i].envp, &interrupted);
            if (interrupted) return 130;
            if (!run) return df_failctx("bench: config '%s' %s %d failed", cs[i].label, round ? "run" : "warm-up", round ? round : 1);
            progress(&cs[i], round ? round : 1, round ? rounds : 1, !round, run);
            if (!round) {
                json_decref(run);
                continue;
            }
            json_array_append_new(cs[i].runs, run);
            if (check_run(cs, i, round, run, refs, &n_refs)) return -1;
        }
    return 0;
}

/* The facts that hold for every configuration: what ran, and the settings inherited by all. */
static json_t *report_head(const BenchArgs *a, const BenchConfig *cs) {
    json_t *inherited = json_object();
    for (char **e = a->base; *e; e++)
        if (!strncmp(*e, "K3_", 3) || !strncmp(*e, "DELTAFIN_", 9)) {
            const char *eq = strchr(*e, '=');
            char name[128];
            if (!eq || eq - *e >= (long)sizeof name) continue;
            snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
            int secret = strstr(name, "KEY") || strstr(name, "TOKEN"); /* DELTAFIN_API_KEY: never in a report */
            json_object_set_new(inherited, name, json_string(secret ? "(set, not shown)" : eq + 1));
        }
    const json_t *run0 = json_array_get(cs[0].runs, 0);
    return json_pack("{s:s?, s:s?, s:s?, s:b, s:i, s:I, s:I, s:I, s:b, s:s, s:o, s:s, s:i, s:s}", "model", a->model,
                     "tokens", a->tokens, "prompt", a->text, "chat", a->chat, "prompt_tokens",
                     (int)json_integer_value(json_object_get(run0, "prompt_tokens")), "max_new", (json_int_t)a->max_new,
                     "chunk", (json_int_t)a->chunk, "runs_per_config", (json_int_t)a->runs, "warmup", a->warmup,
                     "order", "interleaved", "inherited_env", inherited, "baseline", cs[0].label, "cores",
                     (int)sysconf(_SC_NPROCESSORS_ONLN), "kernels",
                     json_string_value(json_object_get(run0, "kernels")));
}

static void print_head(const BenchArgs *a, const BenchConfig *cs, json_t *head) {
    printf("bench: %s | prompt %lld tokens, %lld new | %lld runs per config, interleaved%s | %d cores, %s kernels\n",
           a->model ? a->model : "(the default model)", json_integer_value(json_object_get(head, "prompt_tokens")),
           (long long)a->max_new, (long long)a->runs, a->warmup ? " after a warm-up round" : "",
           (int)json_integer_value(json_object_get(head, "cores")), json_string_value(json_object_get(head, "kernels")));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(head, "inherited_env"), k, v) printf("bench: inherited %s=%s\n", k, json_string_value(v));
    printf("bench: baseline '%s' numerics: %s\n", cs[0].label, cs[0].numerics);
}

static int report(const BenchArgs *a, const BenchConfig *cs) {
    json_t *head = report_head(a, cs);
    print_head(a, cs, head);
    bench_report_table(cs, a->configs.n, stdout);
    int rc = a->json ? bench_report_json(cs, a->configs.n, head, a->json) : 0;
    json_decref(head);
    return rc;
}

/* A private directory for the children's JSON and stderr, removed afterwards. */
static char *make_workdir(const char *tmp) {
    char *dir = path_join(tmp, "deltafin-bench.XXXXXX");
    if (!mkdtemp(dir)) df_die("bench: cannot create a directory %s: %s", dir, strerror(errno));
    return dir;
}

/* Removes the private directory and whatever the children left in it: a child stopped by Ctrl-C
 * while writing its JSON leaves run.json.tmp (fileio.h's atomic write). The directory is ours
 * (mkdtemp), so everything in it is too. */
static void remove_workdir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *ent;
        while ((ent = readdir(d))) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            char *path = path_join(dir, ent->d_name);
            unlink(path);
            free(path);
        }
        closedir(d);
    }
    if (rmdir(dir)) fprintf(stderr, "deltafin: bench: warning: cannot remove %s: %s\n", dir, strerror(errno));
}

int cmd_bench(Settings *set, int argc, char **argv) {
    BenchArgs a;
    parse_args(set, argc, argv, &a);
    BenchConfig cs[BENCH_MAX_CONFIGS];
    for (int i = 0; i < a.configs.n; i++) {
        if (bench_config_parse(&cs[i], a.configs.v[i], a.base)) df_die("%s", df_errmsg());
        for (int k = 0; k < cs[i].n_env; k++) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(strchr(cs[i].env[k], '=') - cs[i].env[k]), cs[i].env[k]);
            if (!settings_find(name))
                fprintf(stderr, "deltafin: bench: warning: %s is not a setting deltafin is known to read\n", name);
        }
        cs[i].runs = json_array();
    }
    char exe[4096];
    if (plat_exe_path(exe, sizeof exe) != 0) df_die("bench: cannot find this program's path: %s", strerror(errno));
    char *dir = make_workdir(set->tmpdir), *json_path = path_join(dir, "run.json"), *err_path = path_join(dir, "run.err");
    char nums[2][24], *num[2] = {nums[0], nums[1]};
    BenchChild ch = {exe, child_argv(&a, exe, json_path, num), json_path, err_path};
    bench_signals_block();
    int rc = measure(&a, cs, &ch);
    remove_workdir(dir);
    free(json_path), free(err_path), free(dir), free(ch.argv);
    if (rc == 130) fprintf(stderr, "deltafin: bench: interrupted\n");
    else if (rc || report(&a, cs)) fprintf(stderr, "deltafin: %s\n", df_errmsg()), rc = 1;
    for (int i = 0; i < a.configs.n; i++) bench_config_free(&cs[i]);
    free_base(&a);
    cli_list_free(&a.configs);
    return rc;
}

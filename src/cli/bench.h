/* bench.h - what the parts of `deltafin bench` share: the configurations under test, running one
 * of them as a child `deltafin run`, and the report.
 *
 * Settings are read once when a process opens the model, so every run is a fresh child process
 * (this binary, `run --stats-json FILE`) with the configuration's environment overrides on top of
 * bench's own environment. The child's JSON (generate_stats_json) is the only result bench reads. */
#ifndef DF_BENCH_H
#define DF_BENCH_H

#include <jansson.h>
#include <stdio.h>

#define BENCH_MAX_CONFIGS 32
#define BENCH_MAX_ENV 16     /* overrides per configuration */

typedef struct {
    const char *label;       /* the --config text as given ("default" for no overrides); borrowed */
    char *names;             /* owned copy of the text, cut into the strings below */
    const char *env[BENCH_MAX_ENV]; /* "NAME=VALUE", pointing into names */
    int n_env;
    char **envp;             /* the child's whole environment (owned array; strings borrowed) */
    json_t *runs;            /* array of each measured run's child JSON (owned) */
    /* filled by the token checks */
    json_t *tokens;          /* the first measured run's "tokens" (borrowed from runs) */
    const char *numerics;    /* its numerics key (borrowed from runs) */
    int lossy;               /* numerics differ from the baseline's */
    int differ, first_diff;  /* tokens that differ from the baseline's first run; first index or -1 */
} BenchConfig;

/* Parses "NAME=VALUE[,NAME=VALUE...]" ("" = no overrides) into c and builds its environment from
 * base. Names must be K3_* or DELTAFIN_* variables, each at most once. Fails with a message. */
int bench_config_parse(BenchConfig *c, const char *text, char *const *base);
void bench_config_free(BenchConfig *c);

/* One child process: argv is run's argv (argv[0] = the binary) ending with "--stats-json" and the
 * path the child writes; err_path receives its stderr. */
typedef struct {
    const char *exe;
    char **argv;
    const char *json_path, *err_path;
} BenchChild;

/* Blocks SIGINT/SIGTERM in bench itself, so an interrupt is seen (and the child stopped) while
 * waiting, never between checks. Call once before the first child. */
void bench_signals_block(void);
/* Runs the child with envp and returns its JSON (new reference), or NULL with a message: the
 * child's last stderr line and exit status, or "interrupted" with *interrupted = 1 after the
 * child was stopped. */
json_t *bench_child_run(const BenchChild *ch, char **envp, int *interrupted);

/* Medians and ranges: the table on f, and (json_path not NULL) the same as JSON. head: the
 * run-independent facts (model, prompt, runs, ...) to put at the top of the JSON (borrowed). */
/* x with four significant digits and no exponent (0.00006162, 0.8123, 12.35, 20091). */
void bench_fmt(char *out, size_t cap, double x);
void bench_report_table(const BenchConfig *cs, int n, FILE *f);
int bench_report_json(const BenchConfig *cs, int n, json_t *head, const char *json_path);

#endif

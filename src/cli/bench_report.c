/* bench_report.c - medians and ranges of each configuration's runs: a table for people and the
 * same numbers as JSON. Decode speed is per generated token after the first (the first comes
 * from the prefill); the ratio is a configuration's median decode s/token over the baseline's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "util/err.h"
#include "util/fileio.h"

typedef enum { M_S_PER_TOKEN, M_TOKENS_PER_S, M_PREFILL_TPS, M_MB_PER_TOKEN, M_COUNT } Metric;

static const char *const metric_names[M_COUNT] = {"decode_s_per_token", "decode_tokens_per_s", "prefill_tokens_per_s",
                                                  "read_mb_per_token"};

typedef struct {
    double median, min, max;
    int n;                   /* 0: the metric does not apply (nothing streamed, one token) */
} Summary;

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

/* One run's value of m; 0 when it does not apply. MB per token: what the streaming store read
 * during decode, over the decoded tokens. */
static int run_metric(const json_t *run, Metric m, double *v) {
    static const char *const keys[] = {"s_per_token", "tokens_per_s", "prefill_tokens_per_s"};
    double decoded = num(run, "generated") - 1;
    if (m != M_MB_PER_TOKEN) {
        *v = num(run, keys[m]);
        return m == M_PREFILL_TPS || decoded > 0;
    }
    const json_t *rd = json_object_get(run, "read");
    if (!json_is_object(rd) || decoded <= 0) return 0;
    *v = (num(rd, "decode_spine_bytes") + num(rd, "decode_expert_bytes")) / 1e6 / decoded;
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills v (room for every run) with the values, sorted. */
static Summary summarize(const BenchConfig *c, Metric m, double *v) {
    Summary s = {0, 0, 0, 0};
    for (size_t i = 0; i < json_array_size(c->runs); i++)
        if (run_metric(json_array_get(c->runs, i), m, &v[s.n])) s.n++;
    if (!s.n) return s;
    qsort(v, (size_t)s.n, sizeof *v, cmp_double);
    s.min = v[0], s.max = v[s.n - 1];
    s.median = s.n % 2 ? v[s.n / 2] : (v[s.n / 2 - 1] + v[s.n / 2]) / 2;
    return s;
}

void bench_fmt(char *out, size_t cap, double x) {
    int decimals = 0;
    for (double t = fabs(x); decimals < 12 && t > 0 && t < 1000; t *= 10) decimals++;
    snprintf(out, cap, "%.*f", decimals, x);
}

/* "median (min..max)" or "-" */
static void fmt_summary(char *out, size_t cap, Summary s) {
    char m[32], lo[32], hi[32];
    if (!s.n) {
        snprintf(out, cap, "-");
        return;
    }
    bench_fmt(m, sizeof m, s.median), bench_fmt(lo, sizeof lo, s.min), bench_fmt(hi, sizeof hi, s.max);
    snprintf(out, cap, "%s (%s..%s)", m, lo, hi);
}

static double ratio(const BenchConfig *cs, int i, double *v) {
    Summary base = summarize(&cs[0], M_S_PER_TOKEN, v), s = summarize(&cs[i], M_S_PER_TOKEN, v);
    return base.n && s.n && base.median > 0 ? s.median / base.median : NAN;
}

static void fmt_tokens(char *out, size_t cap, const BenchConfig *cs, int i) {
    const BenchConfig *c = &cs[i];
    size_t n = json_array_size(c->tokens);
    if (i == 0) snprintf(out, cap, "reference (%zu tokens)", n);
    else if (!c->lossy) snprintf(out, cap, "= baseline");
    else if (!c->differ) snprintf(out, cap, "other numerics (%s): same tokens as baseline", c->numerics);
    else
        snprintf(out, cap, "other numerics (%s): %d of %zu differ from baseline (first at index %d); its runs agree", c->numerics,
                 c->differ, n, c->first_diff);
}

void bench_report_table(const BenchConfig *cs, int n, FILE *f) {
    int w = 6;
    size_t runs_max = 1;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(cs[i].label);
        if (len > w) w = len > 48 ? 48 : len;
        if (json_array_size(cs[i].runs) > runs_max) runs_max = json_array_size(cs[i].runs);
    }
    double *v = df_malloc(sizeof *v * runs_max);
    fprintf(f, "%-*s %4s  %-38s %6s  %-34s %-9s %s\n", w, "config", "runs", "decode s/token: median (min..max)",
            "x base", "prefill tok/s: median (min..max)", "MB/token", "tokens");
    for (int i = 0; i < n; i++) {
        char dec[112], pre[112], mb[32], tok[256], rat[16];
        fmt_summary(dec, sizeof dec, summarize(&cs[i], M_S_PER_TOKEN, v));
        fmt_summary(pre, sizeof pre, summarize(&cs[i], M_PREFILL_TPS, v));
        Summary m = summarize(&cs[i], M_MB_PER_TOKEN, v);
        if (m.n) bench_fmt(mb, sizeof mb, m.median);
        else snprintf(mb, sizeof mb, "-");
        double r = ratio(cs, i, v);
        if (isnan(r)) snprintf(rat, sizeof rat, "-");
        else snprintf(rat, sizeof rat, "%.3f", r);
        fmt_tokens(tok, sizeof tok, cs, i);
        fprintf(f, "%-*s %4zu  %-38s %6s  %-34s %-9s %s\n", w, cs[i].label, json_array_size(cs[i].runs), dec, rat,
                pre, mb, tok);
    }
    free(v);
}

static json_t *summary_json(const BenchConfig *c, Metric m, double *v) {
    Summary s = summarize(c, m, v);
    if (!s.n) return json_null();
    json_t *vals = json_array();
    for (size_t i = 0; i < json_array_size(c->runs); i++) /* in run order, not sorted */
        if (run_metric(json_array_get(c->runs, i), m, &v[0])) json_array_append_new(vals, json_real(v[0]));
    return json_pack("{s:f, s:f, s:f, s:o}", "median", s.median, "min", s.min, "max", s.max, "values", vals);
}

static json_t *config_json(const BenchConfig *cs, int i, double *v) {
    const BenchConfig *c = &cs[i];
    json_t *env = json_object();
    for (int k = 0; k < c->n_env; k++) {
        const char *eq = strchr(c->env[k], '=');
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - c->env[k]), c->env[k]);
        json_object_set_new(env, name, json_string(eq + 1));
    }
    double r = ratio(cs, i, v);
    json_t *o = json_pack("{s:s, s:o, s:s, s:b, s:O, s:b, s:i, s:o, s:o}", "name", c->label, "env", env, "numerics",
                          c->numerics, "lossy", c->lossy, "tokens", c->tokens, "same_as_baseline", c->differ == 0,
                          "tokens_differing_from_baseline", c->differ, "first_difference",
                          c->first_diff < 0 ? json_null() : json_integer(c->first_diff), "ratio_to_baseline",
                          isnan(r) ? json_null() : json_real(r));
    for (int m = 0; m < M_COUNT; m++) json_object_set_new(o, metric_names[m], summary_json(c, (Metric)m, v));
    json_object_set(o, "runs", c->runs);
    return o;
}

int bench_report_json(const BenchConfig *cs, int n, json_t *head, const char *json_path) {
    size_t runs_max = 1;
    for (int i = 0; i < n; i++)
        if (json_array_size(cs[i].runs) > runs_max) runs_max = json_array_size(cs[i].runs);
    double *v = df_malloc(sizeof *v * runs_max);
    json_t *configs = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(configs, config_json(cs, i, v));
    free(v);
    json_t *doc = json_deep_copy(head);
    json_object_set_new(doc, "configs", configs);
    char *text = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
    json_decref(doc);
    int rc = text ? file_write_atomic(json_path, text, strlen(text)) : df_fail("out of memory");
    free(text);
    return rc ? df_failctx("bench: cannot write --json %s", json_path) : 0;
}

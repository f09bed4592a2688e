/* bench_config.c - a bench configuration: its environment overrides, checked, and the child's
 * environment built from them. Only K3_* and DELTAFIN_* variables may be set, so a configuration
 * can change deltafin's settings and nothing else about the process (no PATH, no LD_PRELOAD). */
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/settings.h"
#include "util/err.h"

/* NAME: K3_ or DELTAFIN_ followed by at least one of A-Z 0-9 _. */
static int valid_name(const char *s, size_t n) {
    size_t p = n >= 3 && !memcmp(s, "K3_", 3) ? 3 : n >= 9 && !memcmp(s, "DELTAFIN_", 9) ? 9 : 0;
    if (!p || p == n) return 0;
    for (; p < n; p++)
        if (!((s[p] >= 'A' && s[p] <= 'Z') || (s[p] >= '0' && s[p] <= '9') || s[p] == '_')) return 0;
    return 1;
}

static size_t name_len(const char *assign) { return (size_t)(strchr(assign, '=') - assign); }

/* Whether two variable names are one setting (DELTAFIN_X and its older name K3_X), or equal. */
static int same_variable(const char *a, size_t na, const char *b, size_t nb) {
    const Setting *ra = settings_find_n(a, na);
    return (na == nb && !memcmp(a, b, na)) || (ra && ra == settings_find_n(b, nb));
}

/* Checks one "NAME=VALUE" of config text against the rules and the earlier ones. */
static int check_assignment(const BenchConfig *c, const char *a, const char *text) {
    const char *eq = strchr(a, '=');
    if (!eq) return df_fail("bench: --config '%s': '%s' is not NAME=VALUE", text, a);
    size_t n = (size_t)(eq - a);
    if (!valid_name(a, n))
        return df_fail("bench: --config '%s': '%.*s' is not a K3_* or DELTAFIN_* variable name (only deltafin's "
                       "settings may be set)",
                       text, (int)n, a);
    for (int i = 0; i < c->n_env; i++)
        if (same_variable(c->env[i], name_len(c->env[i]), a, n))
            return df_fail("bench: --config '%s' sets %.*s twice", text, (int)n, a);
    return 0;
}

/* base without the variables c overrides (under either of their names), then c's overrides. */
static void build_envp(BenchConfig *c, char *const *base) {
    size_t nb = 0;
    while (base && base[nb]) nb++;
    c->envp = df_malloc(sizeof *c->envp * (nb + (size_t)c->n_env + 1));
    size_t k = 0;
    for (size_t i = 0; i < nb; i++) {
        const char *eq = strchr(base[i], '=');
        size_t n = eq ? (size_t)(eq - base[i]) : strlen(base[i]);
        int overridden = 0;
        for (int j = 0; j < c->n_env && !overridden; j++) overridden = same_variable(c->env[j], name_len(c->env[j]), base[i], n);
        if (!overridden) c->envp[k++] = base[i];
    }
    for (int j = 0; j < c->n_env; j++) c->envp[k++] = (char *)c->env[j];
    c->envp[k] = NULL;
}

int bench_config_parse(BenchConfig *c, const char *text, char *const *base) {
    memset(c, 0, sizeof *c);
    c->label = *text ? text : "default";
    c->names = df_strdup(text);
    c->first_diff = -1;
    for (char *a = c->names, *next; a && *text; a = next) {
        next = strchr(a, ',');
        if (next) *next++ = 0;
        if (c->n_env == BENCH_MAX_ENV)
            return df_fail("bench: --config '%s' sets more than %d variables", text, BENCH_MAX_ENV);
        if (check_assignment(c, a, text)) return -1;
        c->env[c->n_env++] = a;
    }
    build_envp(c, base);
    return 0;
}

void bench_config_free(BenchConfig *c) {
    free(c->names);
    free(c->envp);
    json_decref(c->runs);
    memset(c, 0, sizeof *c);
}

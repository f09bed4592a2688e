#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static void print_usage(const char *usage, const ArgSpec *specs, int n) {
    printf("usage: %s\n", usage);
    for (int i = 0; i < n; i++)
        printf("  --%-16s %s\n", specs[i].name, specs[i].help ? specs[i].help : "");
}

static int set_value(const ArgSpec *s, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case ARG_STR:
        *(const char **)s->out = v;
        return 0;
    case ARG_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) return df_fail("--%s: '%s' is not an integer", s->name, v);
        *(int64_t *)s->out = x;
        return 0;
    }
    case ARG_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end) return df_fail("--%s: '%s' is not a number", s->name, v);
        *(double *)s->out = x;
        return 0;
    }
    case ARG_FLAG:
        break;
    }
    return df_fail("--%s takes no value", s->name);
}

static const ArgSpec *find_spec(const ArgSpec *specs, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && memcmp(specs[i].name, name, len) == 0) return &specs[i];
    return NULL;
}

int args_parse(int argc, char **argv, const ArgSpec *specs, int n_specs, const char **pos,
               int max_pos, int *n_pos, const char *usage) {
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(usage, specs, n_specs);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (*n_pos >= max_pos) return df_fail("unexpected argument '%s' (usage: %s)", a, usage);
            pos[(*n_pos)++] = a;
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const ArgSpec *s = find_spec(specs, n_specs, name, len);
        if (!s) return df_fail("unknown option '%.*s' (usage: %s)", (int)(len + 2), a, usage);
        if (s->type == ARG_FLAG) {
            if (eq) return df_fail("--%s takes no value", s->name);
            *(int *)s->out = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) return df_fail("--%s needs a value", s->name);
        if (set_value(s, v)) return -1;
    }
    return 0;
}

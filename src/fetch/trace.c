#include "fetch/trace.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static int count_line(const char *line, size_t len, const K3Config *cfg, uint64_t *counts, const char *path, long no) {
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = json_is_object(obj) ? 0 : df_fail("%s:%ld: not a JSON object", path, no);
    json_t *layers = rc ? NULL : json_object_get(obj, "layers");
    if (!rc && layers && !json_is_object(layers)) rc = df_fail("%s:%ld: \"layers\" is not an object", path, no);
    if (!layers) layers = obj;
    const char *key;
    json_t *list;
    if (!rc) json_object_foreach(layers, key, list) {
        if (layers == obj && !strcmp(key, "pos")) continue;
        char *end;
        long l = strtol(key, &end, 10);
        if (*end || end == key || l < cfg->first_dense || l >= cfg->n_layers) {
            rc = df_fail("%s:%ld: key '%s' is not a MoE layer index", path, no, key);
            break;
        }
        size_t i;
        json_t *v;
        if (!json_is_array(list)) rc = df_fail("%s:%ld: layer %s: not a list of expert ids", path, no, key);
        if (!rc) json_array_foreach(list, i, v) {
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x >= cfg->n_experts) {
                rc = df_fail("%s:%ld: layer %s: expert id out of range 0..%d", path, no, key, cfg->n_experts - 1);
                break;
            }
            counts[(size_t)l * cfg->n_experts + (size_t)x]++;
        }
        if (rc) break;
    }
    json_decref(obj);
    return rc;
}

int router_trace_count(const char *path, const K3Config *cfg, uint64_t *counts, uint64_t *tokens) {
    FILE *f = fopen(path, "r");
    if (!f) return df_fail("%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long no = 0;
    int rc = 0;
    *tokens = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        no++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n == 0) continue;
        rc = count_line(line, (size_t)n, cfg, counts, path, no);
        if (!rc) (*tokens)++;
    }
    free(line);
    fclose(f);
    return rc;
}

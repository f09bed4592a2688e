#include "format/index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int index_shard_number(const char *s, int *i, int *n) {
    int a, b, used = 0;
    if (sscanf(s, "model-%5d-of-%6d.safetensors%n", &a, &b, &used) != 2 || (size_t)used != strlen(s)) return -1;
    if (a < 1 || b < 1 || a > b || b > INDEX_MAX_SHARDS) return -1;
    *i = a, *n = b;
    return 0;
}

int index_shard_name_ok(const char *s, size_t len) {
    static const char ext[] = ".safetensors";
    size_t n = strlen(s), ext_len = sizeof ext - 1;
    if (n != len || n <= ext_len || n > INDEX_MAX_NAME || strcmp(s + n - ext_len, ext)) return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f || *p == '/' || *p == '\\') return 0;
    return 1;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The distinct shard names of the weight_map, sorted, in ix->shards (sorting first keeps this
 * n log n for any map a server may send). */
static int collect_shards(ShardIndex *ix, const char *label) {
    size_t n = json_object_size(ix->weight_map), k = 0;
    const char **all = df_malloc(sizeof *all * n);
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(ix->weight_map, key, v) {
        const char *s = json_string_value(v);
        if (!s || !index_shard_name_ok(s, json_string_length(v))) {
            rc = df_fail("%s: weight_map.%s: not a shard file name (a name in the model's directory, without '/', "
                         "ending in .safetensors)", label, key);
            break;
        }
        all[k++] = s;
    }
    if (!rc) qsort(all, k, sizeof *all, cmp_cstr);
    size_t distinct = 0;
    for (size_t i = 0; i < k && !rc; i++) distinct += i == 0 || strcmp(all[i - 1], all[i]);
    if (!rc && distinct > INDEX_MAX_SHARDS) rc = df_fail("%s: more than %d shards", label, INDEX_MAX_SHARDS);
    if (!rc) {
        ix->shards = df_malloc(sizeof *ix->shards * (distinct ? distinct : 1));
        for (size_t i = 0; i < k; i++)
            if (i == 0 || strcmp(all[i - 1], all[i])) ix->shards[ix->n_shards++] = df_strdup(all[i]);
    }
    free(all);
    return rc;
}

int index_parse(ShardIndex *ix, const char *text, size_t len, const char *label) {
    memset(ix, 0, sizeof *ix);
    json_error_t jerr;
    ix->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!ix->root) return df_fail("%s: invalid JSON at line %d: %s", label, jerr.line, jerr.text);
    ix->weight_map = json_object_get(ix->root, "weight_map");
    if (!json_is_object(ix->weight_map)) return df_fail("%s: weight_map: missing or not an object", label);
    if (json_object_size(ix->weight_map) == 0) return df_fail("%s: weight_map is empty: the index names no tensor", label);
    return collect_shards(ix, label);
}

void index_free(ShardIndex *ix) {
    for (int k = 0; k < ix->n_shards; k++) free(ix->shards[k]);
    free(ix->shards);
    json_decref(ix->root);
    memset(ix, 0, sizeof *ix);
}

#include "format/catalog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/index.h"
#include "format/schema.h"
#include "util/err.h"
#include "util/fileio.h"

void catalog_shard_name(char *buf, size_t len, int i, int n) {
    snprintf(buf, len, "model-%05d-of-%06d.safetensors", i, n);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Shard file names from the index (validated: 1..N of N, sorted); *files is a copy. */
static int shards_from_index(const char *dir, char ***files, int *n, ShardIndex *ix) {
    char *path = path_join(dir, INDEX_FILE), *text;
    size_t len;
    int rc = file_read_all(path, INDEX_MAX_BYTES, &text, &len);
    if (!rc) {
        rc = index_parse(ix, text, len, path);
        free(text);
    }
    free(path);
    *files = NULL, *n = 0;
    if (rc) return -1;
    *files = df_malloc(sizeof **files * (size_t)ix->n_shards);
    for (int i = 0; i < ix->n_shards; i++) (*files)[i] = df_strdup(ix->shards[i]);
    *n = ix->n_shards;
    return 0;
}

/* Every weight_map entry must name a tensor that really is in the shard the index says. */
static int check_index(const Catalog *cat, const ShardIndex *ix) {
    json_t *map = ix->weight_map;
    const char *key;
    json_t *v;
    size_t listed = 0;
    json_object_foreach(map, key, v) {
        const TensorInfo *t = catalog_find(cat, key);
        listed++;
        if (!t) return df_fail("%s/" INDEX_FILE ": weight_map names %s, which no shard holds", cat->dir, key);
        if (strcmp(cat->shards[t->shard].file, json_string_value(v)) != 0)
            return df_fail("%s/" INDEX_FILE ": weight_map puts %s in %s, but it is in %s", cat->dir, key,
                           json_string_value(v), cat->shards[t->shard].file);
    }
    if (listed != (size_t)cat->n_tensors)
        return df_fail("%s/" INDEX_FILE ": weight_map lists %zu tensors, the shards hold %d", cat->dir, listed, cat->n_tensors);
    return 0;
}

static int shards_from_listing(const char *dir, char ***files, int *n) {
    DIR *d = opendir(dir);
    if (!d) return df_fail("%s: cannot open directory: %s", dir, strerror(errno));
    char **list = NULL;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int si, sn;
        if (index_shard_number(de->d_name, &si, &sn)) continue;
        if (count >= INDEX_MAX_SHARDS) break;
        list = df_realloc(list, sizeof *list * (size_t)(count + 1));
        list[count++] = df_strdup(de->d_name);
    }
    closedir(d);
    *files = list, *n = count;
    if (!count) return df_fail("%s: no model-NNNNN-of-NNNNNN.safetensors shards found", dir);
    return 0;
}

/* The shard set must be exactly 1..N of N. */
static int check_shard_set(const char *dir, char **files, int n) {
    qsort(files, (size_t)n, sizeof *files, cmp_str);
    for (int k = 0; k < n; k++) {
        int i, total;
        index_shard_number(files[k], &i, &total);
        if (total != n || i != k + 1) {
            char want[64];
            catalog_shard_name(want, sizeof want, k + 1, n);
            return df_fail("%s: shard set is incomplete or inconsistent: expected %s, found %s", dir, want, files[k]);
        }
    }
    return 0;
}

static int read_headers(const char *dir, char **files, int n, StHeader *headers) {
    for (int i = 0; i < n; i++) {
        char *path = path_join(dir, files[i]);
        int fd = file_open_regular(path);
        int rc = fd < 0 ? -1 : st_read_header(&headers[i], fd, i, path);
        if (fd >= 0) close(fd);
        free(path);
        if (rc) return -1;
    }
    return 0;
}

static void free_names(char **files, int n) {
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
}

int catalog_open(Catalog *cat, const char *dir) {
    memset(cat, 0, sizeof *cat);
    K3Config cfg;
    char *cfg_path = path_join(dir, "config.json");
    int rc = config_load(&cfg, cfg_path);
    free(cfg_path);
    if (rc) return -1;
    char **files = NULL;
    int n = 0;
    char *index_path = path_join(dir, INDEX_FILE);
    int has_index = access(index_path, F_OK) == 0;
    free(index_path);
    ShardIndex ix = {0};
    rc = has_index ? shards_from_index(dir, &files, &n, &ix) : shards_from_listing(dir, &files, &n);
    if (!rc && !has_index) rc = check_shard_set(dir, files, n);
    StHeader *headers = df_calloc((size_t)n, sizeof *headers);
    if (!rc) rc = read_headers(dir, files, n, headers);
    if (!rc) rc = catalog_build(cat, dir, &cfg, headers, files, n);
    else
        for (int i = 0; i < n; i++) st_header_free(&headers[i]);
    if (!rc && has_index && check_index(cat, &ix)) {
        catalog_free(cat);
        rc = -1;
    }
    index_free(&ix);
    free(headers);
    free_names(files, n);
    return rc;
}

/* jsonl.h - JSON Lines input for the data tools (train_bpe, encode_data): one JSON object per
 * line, read in order, errors naming the file and line. Header-only: each tool is one file. */
#ifndef DF_TOOLS_JSONL_H
#define DF_TOOLS_JSONL_H

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

typedef struct {
    const char *path;
    FILE *f;
    char *line;
    size_t cap, lineno;
} JsonlReader;

static inline int jsonl_open(JsonlReader *r, const char *path) {
    *r = (JsonlReader){.path = path, .f = fopen(path, "rb")};
    return r->f ? 0 : df_fail("%s: %s", path, strerror(errno));
}

/* The next line's object: 1 and *out (the caller decrefs), 0 at the end, -1 with a message. */
static inline int jsonl_next(JsonlReader *r, json_t **out) {
    *out = NULL;
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) return ferror(r->f) ? df_fail("%s: read failed: %s", r->path, strerror(errno)) : 0;
    r->lineno++;
    json_error_t e;
    *out = json_loadb(r->line, (size_t)n, 0, &e);
    if (!json_is_object(*out)) {
        json_decref(*out);
        return df_fail("%s:%zu: expected a JSON object (%s)", r->path, r->lineno, *out ? "not an object" : e.text);
    }
    return 1;
}

/* The string member `key` of obj, or NULL with a message naming the line. */
static inline const char *jsonl_string(const JsonlReader *r, const json_t *obj, const char *key, size_t *len) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        df_fail("%s:%zu: \"%s\" missing or not a string", r->path, r->lineno, key);
        return NULL;
    }
    *len = json_string_length(v);
    return json_string_value(v);
}

static inline void jsonl_close(JsonlReader *r) {
    if (r->f) fclose(r->f);
    free(r->line);
    *r = (JsonlReader){0};
}

#endif

#include "fetch/revision.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/digest.h"
#include "util/err.h"

static int by_name(const void *a, const void *b) { return strcmp(((const RevisionFile *)a)->name, ((const RevisionFile *)b)->name); }

static int plain_name(const char *s) {
    if (!*s || !strcmp(s, ".") || !strcmp(s, "..") || strlen(s) > 255) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

/* An optional non-negative integer field. */
static int opt_size(json_t *o, const char *key, int *have, uint64_t *v, const char *label, size_t i, const char *where) {
    json_t *x = json_object_get(o, key);
    *have = 0;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return df_fail("%s: siblings[%zu]%s.%s: not a non-negative integer", label, i, where, key);
    *have = 1, *v = (uint64_t)json_integer_value(x);
    return 0;
}

/* An optional lowercase hex digest of n digits. */
static int opt_hex(json_t *o, const char *key, size_t n, char *out, const char *label, size_t i, const char *where) {
    json_t *x = json_object_get(o, key);
    out[0] = 0;
    if (!x || json_is_null(x)) return 0;
    const char *s = json_string_value(x);
    if (!s || !is_hex_digest(s, n)) return df_fail("%s: siblings[%zu]%s.%s: not %zu hex digits", label, i, where, key, n);
    memcpy(out, s, n + 1);
    return 0;
}

static int parse_sibling(RevisionInfo *ri, json_t *e, size_t i, const char *label) {
    if (!json_is_object(e)) return df_fail("%s: siblings[%zu]: not an object", label, i);
    const char *name = json_string_value(json_object_get(e, "rfilename"));
    if (!name) return df_fail("%s: siblings[%zu].rfilename: missing or not a string", label, i);
    if (!plain_name(name)) return 0; /* in a subfolder, or a name no install uses */
    RevisionFile f = {0};
    json_t *lfs = json_object_get(e, "lfs");
    if (opt_size(e, "size", &f.have_size, &f.size, label, i, "") || opt_hex(e, "blobId", 40, f.blob, label, i, ""))
        return -1;
    if (lfs && !json_is_null(lfs)) {
        int have;
        uint64_t size;
        if (!json_is_object(lfs)) return df_fail("%s: siblings[%zu].lfs: not an object", label, i);
        if (opt_hex(lfs, "sha256", 64, f.lfs_sha256, label, i, ".lfs") || opt_size(lfs, "size", &have, &size, label, i, ".lfs"))
            return -1;
        if (have && f.have_size && size != f.size)
            return df_fail("%s: siblings[%zu]: size %llu and lfs.size %llu disagree", label, i, (unsigned long long)f.size,
                           (unsigned long long)size);
        if (have) f.have_size = 1, f.size = size;
    }
    f.name = df_strdup(name);
    if ((ri->n & (ri->n - 1)) == 0) ri->f = df_realloc(ri->f, sizeof *ri->f * (size_t)(ri->n ? 2 * ri->n : 1));
    ri->f[ri->n++] = f;
    return 0;
}

int revision_parse(RevisionInfo *ri, const char *text, size_t len, const char *label) {
    memset(ri, 0, sizeof *ri);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return df_fail("%s: not JSON (line %d: %s)", label, jerr.line, jerr.text);
    int rc = 0;
    const char *sha = json_string_value(json_object_get(root, "sha"));
    json_t *sib = json_object_get(root, "siblings");
    if (!json_is_object(root)) rc = df_fail("%s: not a JSON object", label);
    else if (!sha || !is_hex_digest(sha, 40)) rc = df_fail("%s: sha: missing or not a 40-digit commit", label);
    else if (!json_is_array(sib)) rc = df_fail("%s: siblings: missing or not an array", label);
    else if (json_array_size(sib) > REVISION_MAX_FILES) rc = df_fail("%s: siblings: more than %d files", label, REVISION_MAX_FILES);
    if (!rc) memcpy(ri->commit, sha, 41);
    size_t i;
    json_t *e;
    if (!rc) json_array_foreach(sib, i, e) {
        if ((rc = parse_sibling(ri, e, i, label))) break;
    }
    json_decref(root);
    if (!rc && ri->n) { /* sorted for lookups; a name listed twice is refused */
        qsort(ri->f, (size_t)ri->n, sizeof *ri->f, by_name);
        for (int k = 1; k < ri->n && !rc; k++)
            if (!strcmp(ri->f[k - 1].name, ri->f[k].name)) rc = df_fail("%s: siblings: %s listed twice", label, ri->f[k].name);
    }
    return rc;
}

void revision_free(RevisionInfo *ri) {
    for (int i = 0; i < ri->n; i++) free(ri->f[i].name);
    free(ri->f);
    memset(ri, 0, sizeof *ri);
}

const RevisionFile *revision_find(const RevisionInfo *ri, const char *name) {
    if (!ri->n) return NULL;
    RevisionFile key = {.name = (char *)name};
    return bsearch(&key, ri->f, (size_t)ri->n, sizeof *ri->f, by_name);
}

void revision_pub(const RevisionFile *f, char out[80]) {
    if (*f->lfs_sha256) snprintf(out, 80, "sha256:%s", f->lfs_sha256);
    else if (*f->blob) snprintf(out, 80, "git-sha1:%s", f->blob);
    else out[0] = 0;
}

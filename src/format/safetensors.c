#include "format/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/fileio.h"

static const char *const dtype_names[] = {"BF16", "F32", "U8", "I8", "F16"};
static const size_t dtype_sizes[] = {2, 4, 1, 1, 2};

const char *dtype_name(Dtype d) { return dtype_names[d]; }
size_t dtype_size(Dtype d) { return dtype_sizes[d]; }

static int parse_dtype(const char *s, Dtype *out) {
    for (int i = 0; i <= DT_U8; i++) /* shards may only hold BF16, F32, U8 */
        if (!strcmp(s, dtype_names[i])) return *out = (Dtype)i, 0;
    return -1;
}

static int parse_shape(json_t *shape, TensorInfo *t, uint64_t *elems) {
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS) return -1;
    t->ndim = (int)json_array_size(shape);
    *elems = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (INT64_C(1) << 40)) return -1;
        t->shape[i] = json_integer_value(d);
        if (*elems > (UINT64_C(1) << 48) / (uint64_t)(t->shape[i] ? t->shape[i] : 1)) return -1;
        *elems *= (uint64_t)t->shape[i];
    }
    return 0;
}

static int parse_entry(TensorInfo *t, const char *name, json_t *v, uint64_t data_start, const char *label) {
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !sh || !json_is_array(off) || json_array_size(off) != 2)
        return df_fail("%s: tensor %s: header entry needs dtype, shape and data_offsets", label, name);
    if (parse_dtype(json_string_value(dt), &t->dtype))
        return df_fail("%s: tensor %s: dtype %s is not supported (BF16, F32 or U8 expected)", label, name,
                       json_string_value(dt));
    uint64_t elems;
    if (parse_shape(sh, t, &elems)) return df_fail("%s: tensor %s: invalid shape", label, name);
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return df_fail("%s: tensor %s: invalid data_offsets", label, name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (end - begin != elems * dtype_size(t->dtype))
        return df_fail("%s: tensor %s: data_offsets span %llu bytes but shape and dtype need %llu", label, name,
                       (unsigned long long)(end - begin), (unsigned long long)(elems * dtype_size(t->dtype)));
    t->name = df_strdup(name);
    t->offset = data_start + begin;
    t->nbytes = end - begin;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const TensorInfo *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Tensors must tile the data region: sorted by offset, each starts where the previous ended. */
static int check_tiling(StHeader *h, const char *label) {
    TensorInfo *s = df_malloc(sizeof *s * (size_t)(h->n ? h->n : 1));
    memcpy(s, h->t, sizeof *s * (size_t)h->n);
    qsort(s, (size_t)h->n, sizeof *s, cmp_offset);
    uint64_t at = h->data_start;
    int rc = 0;
    for (int i = 0; i < h->n && !rc; i++) {
        if (s[i].offset < at)
            rc = df_fail("%s: tensor %s overlaps %s (data region bytes %llu..%llu)", label, s[i].name, s[i - 1].name,
                         (unsigned long long)(s[i].offset - h->data_start), (unsigned long long)(at - h->data_start));
        else if (s[i].offset > at)
            rc = df_fail("%s: gap in the data region before tensor %s (bytes %llu..%llu belong to no tensor)", label,
                         s[i].name, (unsigned long long)(at - h->data_start), (unsigned long long)(s[i].offset - h->data_start));
        at = s[i].offset + s[i].nbytes;
    }
    h->data_size = at - h->data_start;
    free(s);
    return rc;
}

int st_parse_header(StHeader *h, const char *json, size_t len, int shard, const char *label) {
    memset(h, 0, sizeof *h);
    h->header_len = len;
    h->data_start = 8 + len;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return df_fail("%s: safetensors header is not valid JSON (line %d: %s)", label, jerr.line, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return df_fail("%s: safetensors header is not a JSON object", label);
    }
    h->t = df_calloc(json_object_size(root) + 1, sizeof *h->t);
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, name, v) {
        if (!strcmp(name, "__metadata__")) continue;
        TensorInfo *t = &h->t[h->n];
        t->shard = shard;
        if ((rc = parse_entry(t, name, v, h->data_start, label))) break;
        h->n++;
    }
    json_decref(root);
    if (!rc) rc = check_tiling(h, label);
    if (rc) st_header_free(h);
    return rc;
}

int st_read_header(StHeader *h, int fd, int shard, const char *label) {
    memset(h, 0, sizeof *h);
    uint64_t size;
    uint8_t lenb[8];
    if (file_size_fd(fd, &size, label)) return -1;
    if (size < 8) return df_fail("%s: %llu bytes is too short for a safetensors file", label, (unsigned long long)size);
    if (file_pread_full(fd, lenb, 8, 0, label)) return -1;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    if (hlen == 0 || hlen > ST_MAX_HEADER_BYTES)
        return df_fail("%s: header length %llu is invalid (1..%u bytes allowed)", label, (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
    if (hlen > size - 8)
        return df_fail("%s: header length %llu runs past the end of the %llu-byte file", label, (unsigned long long)hlen,
                       (unsigned long long)size);
    char *json = df_malloc((size_t)hlen);
    int rc = file_pread_full(fd, json, (size_t)hlen, 8, label);
    if (!rc) rc = st_parse_header(h, json, (size_t)hlen, shard, label);
    free(json);
    if (rc) return -1;
    if (h->data_start + h->data_size != size) {
        rc = df_fail("%s: file is %llu bytes but its header describes %llu (%s)", label, (unsigned long long)size,
                     (unsigned long long)(h->data_start + h->data_size),
                     size < h->data_start + h->data_size ? "truncated" : "trailing bytes");
        st_header_free(h);
    }
    return rc;
}

void st_header_free(StHeader *h) {
    for (int i = 0; i < h->n; i++) free(h->t[i].name);
    free(h->t);
    memset(h, 0, sizeof *h);
}

char *st_build_header(TensorInfo *t, int n, size_t *out_len) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(e, "dtype", json_string(dtype_name(t[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)at, (json_int_t)(at + t[i].nbytes)));
        json_object_set_new(root, t[i].name, e);
        t[i].offset = at;
        at += t[i].nbytes;
    }
    char *json = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!json) return df_fail("out of memory building a safetensors header"), NULL;
    size_t jl = strlen(json), padded = (jl + 7) & ~(size_t)7;
    char *buf = df_malloc(8 + padded);
    for (int i = 0; i < 8; i++) buf[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
    memcpy(buf + 8, json, jl);
    memset(buf + 8 + jl, ' ', padded - jl);
    free(json);
    *out_len = 8 + padded;
    return buf;
}

/* i8spine.c - writing, checking and mapping the int8 spine files (format in i8spine.h). */
#include "store/i8spine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/numfmt.h"
#include "format/schema.h"
#include "util/err.h"
#include "util/fileio.h"

static const char magic[8] = {'D', 'F', 'I', '8', 'R', 'O', 'W', '1'};

typedef struct {
    uint32_t rows, cols;
    uint64_t src_nbytes;
} I8Header;

static I8Header expected_header(const TensorInfo *t) {
    uint64_t cols = (uint64_t)t->shape[t->ndim - 1];
    return (I8Header){(uint32_t)(t->nbytes / 2 / cols), (uint32_t)cols, t->nbytes};
}

static uint64_t file_bytes(I8Header h) {
    return I8SPINE_HEADER + 4 * (uint64_t)h.rows + (uint64_t)h.rows * h.cols;
}

uint64_t i8spine_file_bytes(const TensorInfo *t) { return file_bytes(expected_header(t)); }
uint32_t i8spine_rows(const TensorInfo *t) { return expected_header(t).rows; }

int i8spine_check_scales(const uint8_t *scales, uint32_t rows, const char *where) {
    for (uint32_t r = 0; r < rows; r++) {
        float s;
        memcpy(&s, scales + 4 * (uint64_t)r, 4);
        if (!(s >= 0 && isfinite(s))) return df_fail("%s: row %u has scale %g (damaged file)", where, r, s);
    }
    return 0;
}

static void header_encode(uint8_t *b, I8Header h) {
    memset(b, 0, I8SPINE_HEADER);
    memcpy(b, magic, 8);
    for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(h.rows >> 8 * i), b[12 + i] = (uint8_t)(h.cols >> 8 * i);
    for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)(h.src_nbytes >> 8 * i);
}

/* The header and file size must be exactly what this tensor's conversion writes. */
static int header_check(const char *path, const uint8_t *b, uint64_t size, const TensorInfo *t) {
    uint8_t want[I8SPINE_HEADER];
    I8Header h = expected_header(t);
    header_encode(want, h);
    if (memcmp(b, magic, 8)) return df_fail("%s: not an int8 spine file (bad magic)", path);
    if (memcmp(b, want, I8SPINE_HEADER))
        return df_fail("%s: header does not match tensor %s (%u x %u from %llu BF16 bytes): rerun deltafin convert-spine",
                       path, t->name, h.rows, h.cols, (unsigned long long)h.src_nbytes);
    if (size != file_bytes(h))
        return df_fail("%s: %llu bytes, expected %llu (truncated or damaged): rerun deltafin convert-spine",
                       path, (unsigned long long)size, (unsigned long long)file_bytes(h));
    return 0;
}

int i8spine_tensors(const Catalog *cat, const TensorInfo ***out) {
    const K3Config *c = &cat->cfg;
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    int cap = 8 + c->n_layers * SCHEMA_MAX_PER_LAYER, n = 0;
    const TensorInfo **v = df_malloc(sizeof *v * (size_t)cap);
    for (int l = -1; l < c->n_layers; l++) {
        int m = l < 0 ? schema_globals(c, e) : schema_layer(c, l, e);
        for (int i = 0; i < m; i++) {
            const TensorInfo *t = e[i].role == ROLE_SPINE ? catalog_find(cat, e[i].name) : NULL;
            if (t && t->dtype == DT_BF16 && t->ndim == 2) v[n++] = t;
        }
    }
    *out = v;
    return n;
}

char *i8spine_path(const Catalog *cat, const TensorInfo *t) {
    size_t len = strlen(cat->dir) + strlen(I8SPINE_SUBDIR) + strlen(t->name) + 8;
    char *p = df_malloc(len);
    snprintf(p, len, "%s/%s/%s.i8", cat->dir, I8SPINE_SUBDIR, t->name);
    return p;
}

int i8spine_check(const Catalog *cat, const TensorInfo *t) {
    char *path = i8spine_path(cat, t);
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
    uint8_t b[I8SPINE_HEADER];
    uint64_t size;
    if (fd < 0) rc = errno == ENOENT ? 0 : df_fail("%s: cannot open: %s", path, strerror(errno));
    else if (file_size_fd(fd, &size, path)) rc = -1;
    else if (size < I8SPINE_HEADER) rc = df_fail("%s: %llu bytes, shorter than its header", path, (unsigned long long)size);
    else rc = file_pread_full(fd, b, sizeof b, 0, path) || header_check(path, b, size, t) ? -1 : 1;
    if (fd >= 0) close(fd);
    free(path);
    return rc;
}

/* A row's scale, max|w| / 127; a non-finite weight cannot be quantised. */
static int row_scale(const TensorInfo *t, const uint16_t *w, uint32_t cols, uint32_t r, float *s) {
    float mx = 0;
    for (uint32_t c = 0; c < cols; c++) {
        float v = bf16_to_f32(w[c]);
        if (!isfinite(v)) return df_fail("%s: row %u column %u is not finite: cannot quantise", t->name, r, c);
        mx = fabsf(v) > mx ? fabsf(v) : mx;
    }
    *s = mx / 127.0f;
    return 0;
}

/* The row's codes: w / s rounded half to even, clamped to -127..127. */
static void quantise_row(const uint16_t *w, uint32_t cols, float s, int8_t *q) {
    for (uint32_t c = 0; c < cols; c++) {
        float v = s > 0 ? rintf(bf16_to_f32(w[c]) / s) : 0.0f; /* the default rounding mode */
        q[c] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

static int write_tensor(int fd, const char *tmp, const TensorInfo *t, const uint16_t *src) {
    I8Header h = expected_header(t);
    uint8_t head[I8SPINE_HEADER];
    header_encode(head, h);
    float *scales = df_malloc(sizeof *scales * (h.rows ? h.rows : 1));
    int rc = 0;
    for (uint32_t r = 0; r < h.rows && !rc; r++) rc = row_scale(t, src + (size_t)r * h.cols, h.cols, r, &scales[r]);
    if (!rc && (file_write_full(fd, head, sizeof head, tmp) || file_write_full(fd, scales, 4 * (size_t)h.rows, tmp)))
        rc = -1;
    enum { CHUNK = 1 << 22 };
    uint32_t per = h.cols ? (uint32_t)(CHUNK / h.cols > 0 ? CHUNK / h.cols : 1) : 1;
    int8_t *q = df_malloc((size_t)per * h.cols + 1);
    for (uint32_t r0 = 0; r0 < h.rows && !rc; r0 += per) {
        uint32_t n = h.rows - r0 < per ? h.rows - r0 : per;
        for (uint32_t i = 0; i < n; i++)
            quantise_row(src + (size_t)(r0 + i) * h.cols, h.cols, scales[r0 + i], q + (size_t)i * h.cols);
        rc = file_write_full(fd, q, (size_t)n * h.cols, tmp);
    }
    free(q), free(scales);
    return rc;
}

int i8spine_convert(const Catalog *cat, const TensorInfo *t, const void *src) {
    char *path = i8spine_path(cat, t), *dir = path_join(cat->dir, I8SPINE_SUBDIR);
    FileReplace r;
    int rc = file_mkdirs(dir);
    if (!rc) rc = file_replace_begin(&r, path, 0, NULL);
    if (!rc) {
        if (write_tensor(r.fd, r.tmp, t, src)) file_replace_abort(&r), rc = -1;
        else rc = file_replace_commit(&r);
    }
    free(dir), free(path);
    return rc;
}

void i8spine_remove_stale(const Catalog *cat, const TensorInfo *t) {
    char *path = i8spine_path(cat, t), *tmp = df_malloc(strlen(path) + 8);
    sprintf(tmp, "%s.tmp", path);
    unlink(tmp); /* usually absent */
    free(tmp), free(path);
}

int i8spine_converted(const Catalog *cat, int *done, int *total) {
    const TensorInfo **v;
    int n = i8spine_tensors(cat, &v), rc = 0;
    *done = 0, *total = n;
    for (int i = 0; i < n && !rc; i++) {
        int k = i8spine_check(cat, v[i]);
        if (k < 0) rc = -1;
        else *done += k;
    }
    free(v);
    return rc;
}

static int map_one(I8Tensor *m, const Catalog *cat, const TensorInfo *t) {
    char *path = i8spine_path(cat, t);
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
    m->t = t;
    if (fd < 0)
        rc = errno == ENOENT ? df_fail("%s: tensor %s has no int8 file: run deltafin convert-spine --model %s", path,
                                       t->name, cat->dir)
                             : df_fail("%s: cannot open: %s", path, strerror(errno));
    if (!rc) rc = file_size_fd(fd, &m->size, path);
    if (!rc && m->size < I8SPINE_HEADER) rc = df_fail("%s: shorter than its header", path);
    if (!rc && (m->map = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        m->map = NULL, rc = df_fail("%s: mmap failed: %s", path, strerror(errno));
    if (!rc) rc = header_check(path, m->map, m->size, t);
    if (!rc) rc = i8spine_check_scales(m->map + I8SPINE_HEADER, expected_header(t).rows, path);
    if (fd >= 0) close(fd);
    free(path);
    return rc;
}

int i8spine_open(I8Spine *s, const Catalog *cat) {
    const TensorInfo **v;
    memset(s, 0, sizeof *s);
    s->n = i8spine_tensors(cat, &v);
    s->t = df_calloc((size_t)s->n, sizeof *s->t);
    int rc = 0;
    for (int i = 0; i < s->n && !rc; i++) {
        rc = map_one(&s->t[i], cat, v[i]);
        if (!rc) s->bytes += s->t[i].size - I8SPINE_HEADER;
    }
    free(v);
    if (rc) i8spine_close(s);
    return rc;
}

void i8spine_close(I8Spine *s) {
    for (int i = 0; i < s->n; i++)
        if (s->t[i].map) munmap((void *)s->t[i].map, s->t[i].size);
    free(s->t);
    memset(s, 0, sizeof *s);
}

int i8spine_mat(const I8Spine *s, const TensorInfo *t, Mat *out) {
    for (int i = 0; i < s->n; i++)
        if (s->t[i].t == t) {
            I8Header h = expected_header(t);
            const uint8_t *base = s->t[i].map + I8SPINE_HEADER;
            *out = (Mat){WF_I8ROW, (int)h.rows, (int)h.cols, base + 4 * (uint64_t)h.rows, base, {0, 0, 0, 0}};
            return 1;
        }
    return 0;
}

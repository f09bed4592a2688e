#include "fetch/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fileio.h"

#define MAGIC "deltafin-manifest 1\n"

void ranges_insert(Range **r, int *n, int *cap, uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    /* first range that ends at or after begin (touching ranges merge) */
    int lo = 0, hi = *n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((*r)[mid].end < begin) lo = mid + 1;
        else hi = mid;
    }
    int j = lo;
    while (j < *n && (*r)[j].begin <= end) {
        if ((*r)[j].begin < begin) begin = (*r)[j].begin;
        if ((*r)[j].end > end) end = (*r)[j].end;
        j++;
    }
    int removed = j - lo;
    if (removed == 0) {
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 8;
            *r = df_realloc(*r, sizeof **r * (size_t)*cap);
        }
        memmove(*r + lo + 1, *r + lo, sizeof **r * (size_t)(*n - lo));
        (*n)++;
    } else if (removed > 1) {
        memmove(*r + lo + 1, *r + j, sizeof **r * (size_t)(*n - j));
        *n -= removed - 1;
    }
    (*r)[lo] = (Range){begin, end};
}

static int valid_name(const char *s) {
    if (!*s || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static int add_entry(Manifest *m, const char *name, uint64_t size, const char *sha, int whole) {
    m->f = df_realloc(m->f, sizeof *m->f * (size_t)(m->n + 1));
    ManifestFile *f = &m->f[m->n];
    memset(f, 0, sizeof *f);
    f->name = df_strdup(name), f->size = size, f->whole = whole, f->fd = -1;
    snprintf(f->sha256, sizeof f->sha256, "%s", sha ? sha : "");
    return m->n++;
}

static int parse(Manifest *m, char *text, const char *path) {
    if (strncmp(text, MAGIC, strlen(MAGIC)) != 0) return df_fail("%s: not a deltafin manifest (version 1)", path);
    char *save = NULL, *line = strtok_r(text + strlen(MAGIC), "\n", &save);
    int cur = -1, left = 0, lineno = 1;
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char name[256], sha[80];
        unsigned long long a, b;
        int whole, verified, nr, used = 0;
        if (left > 0) {
            if (sscanf(line, "%llu %llu%n", &a, &b, &used) != 2 || line[used] || a >= b || b > m->f[cur].size ||
                (m->f[cur].n && a <= m->f[cur].r[m->f[cur].n - 1].end))
                return df_fail("%s:%d: bad range line for %s", path, lineno, m->f[cur].name);
            ranges_insert(&m->f[cur].r, &m->f[cur].n, &m->f[cur].cap, a, b);
            left--;
        } else if (!strncmp(line, "source ", 7)) {
            snprintf(m->source, sizeof m->source, "%s", line + 7);
        } else if (sscanf(line, "file %255s %llu %79s %d %d %d%n", name, &a, sha, &whole, &verified, &nr, &used) == 6 &&
                   !line[used] && valid_name(name) && nr >= 0 && (whole | verified) <= 1 && whole >= 0 && verified >= 0 &&
                   (!strcmp(sha, "-") || strlen(sha) == 64) && manifest_find(m, name) < 0) {
            cur = add_entry(m, name, a, strcmp(sha, "-") ? sha : "", whole);
            m->f[cur].verified = verified;
            left = nr;
        } else {
            return df_fail("%s:%d: malformed line", path, lineno);
        }
    }
    if (left) return df_fail("%s: truncated (ranges of %s missing)", path, m->f[cur].name);
    return 0;
}

int manifest_load(Manifest *m, const char *root) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->path = path_join(root, MANIFEST_FILE);
    if (access(m->path, F_OK) != 0) return 0;
    char *text;
    size_t len;
    if (file_read_all(m->path, 1u << 30, &text, &len)) return -1;
    int rc = strlen(text) != len ? df_fail("%s: contains a NUL byte", m->path) : parse(m, text, m->path);
    free(text);
    return rc;
}

void manifest_free(Manifest *m) {
    for (int i = 0; i < m->n; i++) free(m->f[i].name), free(m->f[i].r);
    free(m->f), free(m->w), free(m->path);
    pthread_mutex_destroy(&m->mu);
    memset(m, 0, sizeof *m);
}

int manifest_find(Manifest *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->f[i].name, name)) return i;
    return -1;
}

static void reset_locked(Manifest *m, int i) {
    m->f[i].n = 0, m->f[i].verified = 0;
    m->dirty = 1;
}

int manifest_entry(Manifest *m, const char *name, uint64_t size, const char *sha256, int whole, int *was_reset) {
    pthread_mutex_lock(&m->mu);
    int i = manifest_find(m, name);
    *was_reset = 0;
    if (i < 0) {
        i = add_entry(m, name, size, sha256, whole);
        m->dirty = 1;
    } else {
        ManifestFile *f = &m->f[i];
        int sha_changed = sha256 && *sha256 && *f->sha256 && strcmp(sha256, f->sha256);
        if (f->size != size || sha_changed || f->whole != whole) {
            *was_reset = f->n > 0;
            reset_locked(m, i);
            f->size = size, f->whole = whole;
        }
        if (sha256 && *sha256 && strcmp(f->sha256, sha256)) snprintf(f->sha256, sizeof f->sha256, "%s", sha256), m->dirty = 1;
    }
    pthread_mutex_unlock(&m->mu);
    return i;
}

void manifest_reset(Manifest *m, int i) {
    pthread_mutex_lock(&m->mu);
    reset_locked(m, i);
    pthread_mutex_unlock(&m->mu);
}

void manifest_set_verified(Manifest *m, int i, int verified) {
    pthread_mutex_lock(&m->mu);
    m->f[i].verified = verified, m->dirty = 1;
    pthread_mutex_unlock(&m->mu);
}

/* End of the recorded range containing `at`, or `at` when none does. */
static uint64_t recorded_end(const ManifestFile *f, uint64_t at) {
    int lo = 0, hi = f->n;
    while (lo < hi) { /* last range starting at or before `at` */
        int mid = (lo + hi) / 2;
        if (f->r[mid].begin <= at) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && f->r[lo - 1].end > at ? f->r[lo - 1].end : at;
}

/* Covered by recorded ranges, plus (with_written) ranges written but not yet committed: those
 * bytes are valid for this process, only not yet durable. */
static int covered_locked(const Manifest *m, int i, uint64_t begin, uint64_t end, int with_written) {
    uint64_t at = begin;
    while (at < end) {
        uint64_t next = recorded_end(&m->f[i], at);
        for (int k = 0; with_written && next == at && k < m->n_w; k++)
            if (m->w[k].file == i && m->w[k].r.begin <= at && m->w[k].r.end > at) next = m->w[k].r.end;
        if (next == at) return 0;
        at = next;
    }
    return 1;
}

int manifest_has(Manifest *m, int i, uint64_t begin, uint64_t end) {
    pthread_mutex_lock(&m->mu);
    int has = covered_locked(m, i, begin, end, 1);
    pthread_mutex_unlock(&m->mu);
    return has;
}

int manifest_has_durable(Manifest *m, int i, uint64_t begin, uint64_t end) {
    pthread_mutex_lock(&m->mu);
    int has = covered_locked(m, i, begin, end, 0);
    pthread_mutex_unlock(&m->mu);
    return has;
}

uint64_t manifest_present_bytes(Manifest *m, int i) {
    pthread_mutex_lock(&m->mu);
    uint64_t sum = 0;
    for (int k = 0; k < m->f[i].n; k++) sum += m->f[i].r[k].end - m->f[i].r[k].begin;
    pthread_mutex_unlock(&m->mu);
    return sum;
}

void manifest_missing(Manifest *m, int i, uint64_t begin, uint64_t end, Range **out, int *n, int *cap) {
    pthread_mutex_lock(&m->mu);
    const ManifestFile *f = &m->f[i];
    uint64_t at = begin;
    for (int k = 0; k < f->n && at < end; k++) {
        if (f->r[k].end <= at) continue;
        if (f->r[k].begin >= end) break;
        if (f->r[k].begin > at) ranges_insert(out, n, cap, at, f->r[k].begin);
        at = f->r[k].end;
    }
    if (at < end) ranges_insert(out, n, cap, at, end);
    pthread_mutex_unlock(&m->mu);
}

void manifest_add_written(Manifest *m, int i, uint64_t begin, uint64_t end) {
    pthread_mutex_lock(&m->mu);
    if (m->n_w == m->cap_w) {
        m->cap_w = m->cap_w ? 2 * m->cap_w : 64;
        m->w = df_realloc(m->w, sizeof *m->w * (size_t)m->cap_w);
    }
    m->w[m->n_w++] = (WrittenRange){i, {begin, end}};
    pthread_mutex_unlock(&m->mu);
}

static char *serialise(const Manifest *m, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = df_malloc(cap);
    for (int i = -1; i < m->n; i++) {
        const ManifestFile *f = i >= 0 ? &m->f[i] : NULL;
        for (int k = -1; k < (f ? f->n : 0); k++) {
            if (cap - n < 600) buf = df_realloc(buf, cap *= 2);
            if (!f) n += (size_t)snprintf(buf + n, cap - n, MAGIC "source %s\n", m->source);
            else if (k < 0)
                n += (size_t)snprintf(buf + n, cap - n, "file %s %llu %s %d %d %d\n", f->name, (unsigned long long)f->size,
                                      *f->sha256 ? f->sha256 : "-", f->whole, f->verified, f->n);
            else
                n += (size_t)snprintf(buf + n, cap - n, "%llu %llu\n", (unsigned long long)f->r[k].begin,
                                      (unsigned long long)f->r[k].end);
        }
    }
    *len = n;
    return buf;
}

static int sync_dir_of(const char *path) {
    char *dir = df_strdup(path), *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (fd < 0 || fsync(fd) != 0) rc = df_fail("%s: cannot sync directory: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

int manifest_commit(Manifest *m) {
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    /* durable first: every file with written ranges is synced before any range is recorded */
    for (int k = 0; k < m->n_w && !rc; k++) {
        ManifestFile *f = &m->f[m->w[k].file];
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) seen = m->w[j].file == m->w[k].file;
        if (!seen && f->fd >= 0 && fdatasync(f->fd) != 0) rc = df_fail("%s: fdatasync failed: %s", f->name, strerror(errno));
    }
    if (!rc) {
        for (int k = 0; k < m->n_w; k++) {
            ManifestFile *f = &m->f[m->w[k].file];
            ranges_insert(&f->r, &f->n, &f->cap, m->w[k].r.begin, m->w[k].r.end);
        }
        m->dirty |= m->n_w > 0;
        m->n_w = 0;
    }
    if (!rc && m->dirty) {
        size_t len;
        char *text = serialise(m, &len);
        rc = file_write_atomic(m->path, text, len);
        if (!rc) rc = sync_dir_of(m->path);
        if (!rc) m->dirty = 0;
        free(text);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

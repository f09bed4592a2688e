#include "fetch/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/digest.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/platform.h"


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

/* A published hash as recorded: "sha256:" + 64 hex or "git-sha1:" + 40 hex. */
static int valid_pub(const char *s) {
    if (!strncmp(s, "sha256:", 7)) return is_hex_digest(s + 7, 64);
    if (!strncmp(s, "git-sha1:", 9)) return is_hex_digest(s + 9, 40);
    return 0;
}

/* 1..max-1 visible characters other than '"' (an identity is fetch/response.c's ETag form). */
static int visible(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '"') return 0;
    return 1;
}

static int add_entry(Manifest *m, const char *name, uint64_t size, int whole) {
    m->f = df_realloc(m->f, sizeof *m->f * (size_t)(m->n + 1));
    ManifestFile *f = &m->f[m->n];
    memset(f, 0, sizeof *f);
    f->name = df_strdup(name), f->size = size, f->whole = whole, f->fd = -1;
    return m->n++;
}

static const char *dash(const char *s) { return strcmp(s, "-") ? s : ""; }

/* Splits line at single spaces into at most max fields (pointers into line, which is modified);
 * returns the count, or -1 for an empty field or more than max. */
static int split_fields(char *line, char **field, int max) {
    int n = 0;
    for (char *p = line;;) {
        if (n == max || !*p || *p == ' ') return -1;
        field[n++] = p;
        char *sp = strchr(p, ' ');
        if (!sp) return n;
        *sp = 0, p = sp + 1;
    }
}

/* A decimal number: digits only, no overflow. */
static int parse_u64(const char *s, uint64_t *v) {
    uint64_t x = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10) return -1;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    *v = x;
    return 0;
}

static int parse_flag(const char *s, int *v) {
    if (strcmp(s, "0") && strcmp(s, "1")) return -1;
    *v = *s == '1';
    return 0;
}

/* One "file ..." line of either version; returns the entry's range count or -1. */
static int parse_file_line(Manifest *m, char *line, int version) {
    char *fl[9];
    int nf = split_fields(line, fl, 9);
    uint64_t size, nr;
    int whole, verified;
    const char *name, *pub, *local, *identity;
    char v1_pub[80];
    if (version == 1) { /* file NAME SIZE SHA|- WHOLE VERIFIED N */
        if (nf != 7 || parse_u64(fl[2], &size) || parse_flag(fl[4], &whole) || parse_flag(fl[5], &verified) ||
            parse_u64(fl[6], &nr) || (*dash(fl[3]) && !is_hex_digest(fl[3], 64)))
            return -1;
        snprintf(v1_pub, sizeof v1_pub, "%s%s", *dash(fl[3]) ? "sha256:" : "", dash(fl[3]));
        name = fl[1], pub = v1_pub, local = "", identity = "";
    } else { /* file NAME SIZE WHOLE N PUB LOCAL VERIFIED IDENTITY */
        if (nf != 9 || parse_u64(fl[2], &size) || parse_flag(fl[3], &whole) || parse_u64(fl[4], &nr) ||
            parse_flag(fl[7], &verified))
            return -1;
        name = fl[1], pub = dash(fl[5]), local = dash(fl[6]), identity = dash(fl[8]);
    }
    if (strcmp(fl[0], "file") || !valid_name(name) || nr > (1u << 30) || manifest_find(m, name) >= 0 ||
        (*pub && !valid_pub(pub)) || (*local && !is_hex_digest(local, 64)) || (*identity && !visible(identity, MANIFEST_ID_MAX)) ||
        (verified && !*pub))
        return -1;
    int e = add_entry(m, name, size, whole);
    snprintf(m->f[e].pub, sizeof m->f[e].pub, "%s", pub);
    snprintf(m->f[e].local, sizeof m->f[e].local, "%s", local);
    snprintf(m->f[e].identity, sizeof m->f[e].identity, "%s", identity);
    m->f[e].verified = verified;
    return (int)nr;
}

/* "revision NAME COMMIT|-" */
static int parse_revision(Manifest *m, char *line) {
    char *fl[3];
    if (split_fields(line, fl, 3) != 3 || strlen(fl[1]) >= sizeof m->revision || !valid_name(fl[1]) ||
        (*dash(fl[2]) && !is_hex_digest(fl[2], 40)))
        return -1;
    snprintf(m->revision, sizeof m->revision, "%s", fl[1]);
    snprintf(m->commit, sizeof m->commit, "%s", dash(fl[2]));
    return 0;
}

/* "BEGIN END" of entry f, after its previous range. */
static int parse_range(ManifestFile *f, char *line) {
    char *fl[2];
    uint64_t a, b;
    if (split_fields(line, fl, 2) != 2 || parse_u64(fl[0], &a) || parse_u64(fl[1], &b) || a >= b || b > f->size ||
        (f->n && a <= f->r[f->n - 1].end))
        return -1;
    ranges_insert(&f->r, &f->n, &f->cap, a, b);
    return 0;
}

static int parse(Manifest *m, char *text, const char *path) {
    if (!strncmp(text, "deltafin-manifest 1\n", 20)) m->version = 1;
    else if (!strncmp(text, "deltafin-manifest 2\n", 20)) m->version = 2;
    else return df_fail("%s: not a deltafin manifest (version 1 or 2)", path);
    char *save = NULL, *line = strtok_r(text + 20, "\n", &save);
    int cur = -1, left = 0, lineno = 1, have_source = 0, have_revision = 0;
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (left > 0) {
            if (parse_range(&m->f[cur], line)) return df_fail("%s:%d: bad range line for %s", path, lineno, m->f[cur].name);
            left--;
        } else if (!strncmp(line, "source ", 7) && !have_source && cur < 0 && visible(line + 7, sizeof m->source)) {
            snprintf(m->source, sizeof m->source, "%s", line + 7);
            have_source = 1;
        } else if (!strncmp(line, "revision ", 9) && m->version == 2 && !have_revision && cur < 0) {
            if (parse_revision(m, line)) return df_fail("%s:%d: malformed revision line", path, lineno);
            have_revision = 1;
        } else if (!strncmp(line, "file ", 5)) {
            if ((left = parse_file_line(m, line, m->version)) < 0) return df_fail("%s:%d: malformed file line", path, lineno);
            cur = m->n - 1;
        } else {
            return df_fail("%s:%d: malformed line", path, lineno);
        }
    }
    if (left) return df_fail("%s: truncated (ranges of %s missing)", path, m->f[cur].name);
    if (m->version == 1) m->dirty = 1; /* rewritten as version 2 at the next commit */
    return 0;
}

int manifest_parse(Manifest *m, const char *text, size_t len, const char *label) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    if (memchr(text, 0, len)) return df_fail("%s: contains a NUL byte", label);
    char *copy = df_malloc(len + 1);
    memcpy(copy, text, len), copy[len] = 0;
    int rc = parse(m, copy, label);
    free(copy);
    return rc;
}

int manifest_load(Manifest *m, const char *root) {
    char *path = path_join(root, MANIFEST_FILE);
    char *text = NULL;
    size_t len = 0;
    int rc = access(path, F_OK) == 0 ? file_read_all(path, 1u << 30, &text, &len) : 0;
    if (!rc && text) rc = manifest_parse(m, text, len, path);
    else {
        memset(m, 0, sizeof *m);
        pthread_mutex_init(&m->mu, NULL);
    }
    free(text);
    m->path = path;
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
    ManifestFile *f = &m->f[i];
    f->n = 0, f->verified = 0, f->local[0] = 0;
    /* written but not yet recorded ranges of this file are dropped as well */
    int k = 0;
    for (int j = 0; j < m->n_w; j++)
        if (m->w[j].file != i) m->w[k++] = m->w[j];
    m->n_w = k;
    m->dirty = 1;
}

static int differs(const char *now, const char *recorded) { return now && *now && *recorded && strcmp(now, recorded); }

int manifest_entry(Manifest *m, const char *name, const ManifestFacts *facts, int *was_reset) {
    pthread_mutex_lock(&m->mu);
    int i = manifest_find(m, name);
    *was_reset = 0;
    if (i < 0) {
        i = add_entry(m, name, facts->size, facts->whole);
        m->dirty = 1;
    } else {
        ManifestFile *f = &m->f[i];
        if (f->size != facts->size || f->whole != facts->whole || differs(facts->pub, f->pub) ||
            (!facts->adopt && differs(facts->identity, f->identity))) {
            *was_reset = f->n > 0;
            reset_locked(m, i);
            f->size = facts->size, f->whole = facts->whole;
            f->pub[0] = f->identity[0] = 0;
        }
    }
    ManifestFile *f = &m->f[i];
    if (facts->pub && *facts->pub && strcmp(f->pub, facts->pub))
        snprintf(f->pub, sizeof f->pub, "%s", facts->pub), m->dirty = 1;
    if (facts->identity && *facts->identity && strcmp(f->identity, facts->identity))
        snprintf(f->identity, sizeof f->identity, "%s", facts->identity), m->dirty = 1;
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

void manifest_set_local(Manifest *m, int i, const char *sha256_hex) {
    pthread_mutex_lock(&m->mu);
    snprintf(m->f[i].local, sizeof m->f[i].local, "%s", sha256_hex);
    m->dirty = 1;
    pthread_mutex_unlock(&m->mu);
}

void manifest_set_revision(Manifest *m, const char *source, const char *revision, const char *commit) {
    pthread_mutex_lock(&m->mu);
    if (strcmp(m->source, source) || strcmp(m->revision, revision) || strcmp(m->commit, commit)) {
        snprintf(m->source, sizeof m->source, "%s", source);
        snprintf(m->revision, sizeof m->revision, "%s", revision);
        snprintf(m->commit, sizeof m->commit, "%s", commit);
        m->dirty = 1;
    }
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

uint64_t manifest_present_end(Manifest *m, int i, uint64_t at) {
    pthread_mutex_lock(&m->mu);
    for (;;) {
        uint64_t next = recorded_end(&m->f[i], at);
        for (int k = 0; next == at && k < m->n_w; k++)
            if (m->w[k].file == i && m->w[k].r.begin <= at && m->w[k].r.end > at) next = m->w[k].r.end;
        if (next == at) break;
        at = next;
    }
    pthread_mutex_unlock(&m->mu);
    return at;
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

static char *serialise_locked(const Manifest *m, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = df_malloc(cap);
    for (int i = -1; i < m->n; i++) {
        const ManifestFile *f = i >= 0 ? &m->f[i] : NULL;
        for (int k = -1; k < (f ? f->n : 0); k++) {
            if (cap - n < 1200) buf = df_realloc(buf, cap *= 2);
            if (!f) {
                n += (size_t)snprintf(buf + n, cap - n, "deltafin-manifest 2\n");
                if (*m->source) n += (size_t)snprintf(buf + n, cap - n, "source %s\n", m->source);
                if (*m->revision)
                    n += (size_t)snprintf(buf + n, cap - n, "revision %s %s\n", m->revision, *m->commit ? m->commit : "-");
            }
            else if (k < 0)
                n += (size_t)snprintf(buf + n, cap - n, "file %s %llu %d %d %s %s %d %s\n", f->name, (unsigned long long)f->size,
                                      f->whole, f->n, *f->pub ? f->pub : "-", *f->local ? f->local : "-", f->verified,
                                      *f->identity ? f->identity : "-");
            else
                n += (size_t)snprintf(buf + n, cap - n, "%llu %llu\n", (unsigned long long)f->r[k].begin,
                                      (unsigned long long)f->r[k].end);
        }
    }
    *len = n;
    return buf;
}

char *manifest_serialise(Manifest *m, size_t *len) {
    pthread_mutex_lock(&m->mu);
    char *text = serialise_locked(m, len);
    pthread_mutex_unlock(&m->mu);
    return text;
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
        if (!seen && f->fd >= 0 && plat_datasync(f->fd) != 0) rc = df_fail("%s: fdatasync failed: %s", f->name, strerror(errno));
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
        char *text = serialise_locked(m, &len);
        rc = file_write_atomic(m->path, text, len);
        if (!rc) rc = sync_dir_of(m->path);
        if (!rc) m->dirty = 0;
        free(text);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* runner.c - fetching a plan: worker threads, each with its own keep-alive connection, take jobs
 * in order; bytes go straight into the sparse shards; the main thread commits finished ranges to
 * the manifest four times a second (fdatasync first) and shows progress. The first job that fails
 * for good stops the others after their current job; everything finished is kept.
 *
 * While the workers download, a hashing thread follows every shard the plan completes: it hashes
 * the shard's bytes in order as soon as they are written (from the page cache, so verification
 * costs no pass over the disk after the download), and once the shard is whole compares the
 * SHA-256 with the published one and records it. A shard resumed from an earlier run has its
 * already present prefix hashed the same way, overlapping the download of the rest.
 *
 * An interrupted range keeps what it received: once a second the main thread records the prefix
 * of every range in flight that has arrived so far (fdatasync'ed first, like a finished range), so
 * a run killed at any moment resumes each range where its bytes stop, however slow the source.
 * The bytes of a prefix were checked like any others (the response's range, size, identity and
 * commit before a byte was written); the shard's SHA-256 is checked when the shard completes. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "fetch/digest.h"
#include "fetch/installer_int.h"
#include "fetch/progress.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fileio.h"

#define HASH_CHUNK (8u << 20)
#define PARTIAL_EVERY_S 1.0 /* how often the prefixes of ranges in flight are recorded */

typedef struct {
    int e;                   /* manifest entry */
    int fd;
    uint64_t size;
    Sha256 h;                /* over bytes [0, h.total) */
    int done, bad;
    char hex[65];
    int *jobs, n_jobs, at;   /* the plan's jobs of this file, ascending; the one at the hash */
} FileHash;

typedef struct {
    Installer *in;
    FetchPlan *plan;
    _Atomic int next, stop, running, downloads_over, hashing_over;
    _Atomic uint64_t received, hashed;
    _Atomic uint64_t *job_written; /* [plan->n] bytes of each job in place so far */
    uint64_t *job_recorded;        /* [plan->n] of them handed to the manifest (main thread only) */
    pthread_mutex_t mu;
    char err[1024];
    FileHash *hash;
    int n_hash;
} Run;

/* Records this thread's error as the run's (the first one wins) and stops the other workers. */
static void fail_run(Run *r) {
    pthread_mutex_lock(&r->mu);
    if (!*r->err) snprintf(r->err, sizeof r->err, "%s", df_errmsg());
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->stop, 1);
}

static void *worker(void *arg) {
    Run *r = arg;
    Installer *in = r->in;
    Conn *c = conn_new(&in->src, in->urls);
    if (c) conn_set_counter(c, &r->received);
    else fail_run(r);
    while (c && !atomic_load(&r->stop)) {
        int k = atomic_fetch_add(&r->next, 1);
        if (k >= r->plan->n) break;
        conn_set_progress(c, &r->job_written[k]);
        FetchJob *j = &r->plan->job[k];
        ManifestFile *f = &in->man.f[j->file];
        RemoteInfo expect;
        installer_expect(in, j->file, &expect);
        if (http_range_retry(c, f->name, j->begin, j->end - j->begin, &expect, f->fd, NULL, NULL) == 0) {
            manifest_add_written(&in->man, j->file, j->begin, j->end);
            continue;
        }
        fail_run(r);
    }
    conn_free(c);
    atomic_fetch_sub(&r->running, 1);
    return NULL;
}

/* Where the bytes of h's file that can no longer change end, from its hash position on: present
 * ranges, and the part of the job at the position written so far (a retry resumes after it). */
static uint64_t settled_end(Run *r, FileHash *h) {
    uint64_t at = h->h.total;
    for (;;) {
        uint64_t present = manifest_present_end(&r->in->man, h->e, at);
        if (present > at) {
            at = present;
            continue;
        }
        while (h->at < h->n_jobs && r->plan->job[h->jobs[h->at]].end <= at) h->at++;
        if (h->at == h->n_jobs) return at;
        const FetchJob *j = &r->plan->job[h->jobs[h->at]];
        if (j->begin > at) return at;
        uint64_t end = j->begin + atomic_load(&r->job_written[h->jobs[h->at]]);
        if (end <= at) return at;
        at = end < j->end ? end : j->end;
        if (at < j->end) return at;
    }
}

/* Hashes h's file as far as its bytes are settled; 1 if it advanced. Reads of less than 1 MiB
 * wait for more bytes, unless they finish the file. */
static int hash_step(Run *r, FileHash *h) {
    if (h->done || h->bad) return 0;
    uint64_t end = settled_end(r, h);
    if (end - h->h.total < (1u << 20) && end != h->size) return 0;
    uint8_t *buf = df_malloc(HASH_CHUNK);
    while (h->h.total < end) {
        size_t n = end - h->h.total < HASH_CHUNK ? (size_t)(end - h->h.total) : HASH_CHUNK;
        if (file_pread_full(h->fd, buf, n, h->h.total, r->in->man.f[h->e].name)) {
            h->bad = 1; /* unreadable: the verification pass reports it */
            break;
        }
        sha256_update(&h->h, buf, n);
        atomic_fetch_add(&r->hashed, n);
    }
    free(buf);
    if (!h->bad && h->h.total == h->size) {
        if (sha256_final(&h->h, h->hex)) h->bad = 1; /* the verification pass hashes it again */
        else h->done = 1;
    }
    return 1;
}

static void *hasher(void *arg) {
    Run *r = arg;
    for (;;) {
        int moved = 0, left = 0;
        for (int i = 0; i < r->n_hash; i++) {
            moved |= hash_step(r, &r->hash[i]);
            left += !r->hash[i].done && !r->hash[i].bad;
        }
        if (!left) break;
        /* after the downloads nothing more arrives: a pass that found nothing new is the end */
        if (!moved && atomic_load(&r->downloads_over)) break;
        if (!moved) sleep_ms(5);
    }
    atomic_store(&r->hashing_over, 1);
    return NULL;
}

/* 1 when the plan's jobs for entry e cover everything e lacks (and it lacks something). */
static int plan_completes(Installer *in, const FetchPlan *p, int e) {
    Range *planned = NULL, *missing = NULL;
    int np = 0, cp = 0, nm = 0, cm = 0, covered = 1;
    for (int k = 0; k < p->n; k++)
        if (p->job[k].file == e) ranges_insert(&planned, &np, &cp, p->job[k].begin, p->job[k].end);
    manifest_missing(&in->man, e, 0, in->man.f[e].size, &missing, &nm, &cm);
    for (int k = 0; k < nm && covered; k++) {
        int hit = 0;
        for (int j = 0; j < np && !hit; j++) hit = planned[j].begin <= missing[k].begin && missing[k].end <= planned[j].end;
        covered = hit;
    }
    free(planned), free(missing);
    return np > 0 && nm > 0 && covered;
}

/* The shards this plan completes: each is hashed while it downloads. */
static void plan_hashes(Run *r) {
    Installer *in = r->in;
    const FetchPlan *p = r->plan;
    for (int s = 0; s < in->cat->n_shards; s++) {
        int e = in->shard_entry[s];
        ManifestFile *f = &in->man.f[e];
        if (!plan_completes(in, p, e)) continue;
        Sha256 sh;
        if (sha256_init(&sh)) continue; /* hashed by the verification pass instead */
        r->hash = df_realloc(r->hash, sizeof *r->hash * (size_t)(r->n_hash + 1));
        FileHash *h = &r->hash[r->n_hash++];
        memset(h, 0, sizeof *h);
        h->h = sh;
        h->e = e, h->fd = f->fd, h->size = f->size;
        for (int k = 0; k < p->n; k++) /* a plan lists each file's jobs in ascending order */
            if (p->job[k].file == e) {
                h->jobs = df_realloc(h->jobs, sizeof *h->jobs * (size_t)(h->n_jobs + 1));
                h->jobs[h->n_jobs++] = k;
            }
    }
}

/* Forgets the hashes in progress (their shards are hashed by a later verification pass). */
static void drop_hashes(Run *r) {
    for (int i = 0; i < r->n_hash; i++) {
        if (r->hash[i].h.ctx) sha256_abort(&r->hash[i].h);
        free(r->hash[i].jobs);
    }
    free(r->hash);
    r->hash = NULL, r->n_hash = 0;
}

/* Records each complete shard's hash; a shard that does not match its published SHA-256 loses
 * its bytes. Every mismatch is named in one message. */
static int finish_hashes(Run *r) {
    Manifest *m = &r->in->man;
    char bad[700] = "";
    int n_bad = 0;
    for (int i = 0; i < r->n_hash; i++) {
        FileHash *h = &r->hash[i];
        if (!h->done) {
            if (h->h.ctx) sha256_abort(&h->h);
            continue;
        }
        ManifestFile *f = &m->f[h->e];
        if (!strncmp(f->pub, "sha256:", 7) && strcmp(f->pub + 7, h->hex)) {
            fprintf(stderr, "deltafin: %s: SHA-256 %s does not match the published %s: its bytes are discarded\n", f->name,
                    h->hex, f->pub + 7);
            size_t at = strlen(bad);
            if (at < sizeof bad - 80) snprintf(bad + at, sizeof bad - at, "%s%s", n_bad ? ", " : "", f->name);
            n_bad++;
            manifest_reset(m, h->e);
            continue;
        }
        manifest_set_local(m, h->e, h->hex);
        if (!strncmp(f->pub, "sha256:", 7)) manifest_set_verified(m, h->e, 1);
    }
    for (int i = 0; i < r->n_hash; i++) free(r->hash[i].jobs);
    free(r->hash);
    if (n_bad)
        return df_fail("%d shard(s) do not match their published SHA-256 (%s): their bytes were discarded; run the "
                       "command again to fetch them anew",
                       n_bad, bad);
    return 0;
}

int installer_disk_free(Installer *in, uint64_t *free_bytes) {
    if (in->fetch.disk_free_bytes >= 0) {
        *free_bytes = (uint64_t)in->fetch.disk_free_bytes;
        return 0;
    }
    /* the root may not exist yet (dry run): ask its nearest existing ancestor */
    char *dir = df_strdup(in->root), *slash;
    struct statvfs sv;
    int rc;
    while ((rc = statvfs(dir, &sv)) != 0 && errno == ENOENT && (slash = strrchr(dir, '/')) && slash != dir) *slash = 0;
    if (rc != 0 && errno == ENOENT && strchr(dir, '/') == NULL) rc = statvfs(".", &sv);
    if (rc != 0) rc = df_fail("%s: cannot query free space: %s", in->root, strerror(errno));
    else *free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
    free(dir);
    return rc;
}

/* Hands the manifest the bytes every started job has in place (a prefix of its range: a retry
 * resumes after it), so the next commit records them durably; returns what the plan has handed
 * over in all. */
static uint64_t record_prefixes(Run *r) {
    int started = atomic_load(&r->next);
    uint64_t handed = 0;
    for (int k = 0; k < started && k < r->plan->n; k++) {
        const FetchJob *j = &r->plan->job[k];
        uint64_t w = atomic_load(&r->job_written[k]);
        if (w > r->job_recorded[k]) {
            manifest_add_written(&r->in->man, j->file, j->begin, j->begin + w);
            r->job_recorded[k] = w;
        }
        handed += r->job_recorded[k];
    }
    return handed;
}

/* Opens (creating, sized) every shard the plan writes into; the others stay closed. */
static int open_planned_shards(Installer *in, const FetchPlan *p) {
    uint8_t *planned = df_calloc((size_t)in->man.n + 1, 1);
    for (int k = 0; k < p->n; k++) planned[p->job[k].file] = 1;
    int rc = 0;
    for (int s = 0; s < in->cat->n_shards && !rc; s++)
        if (planned[in->shard_entry[s]]) rc = installer_open_shard(in, s);
    free(planned);
    return rc;
}

static uint64_t hash_bytes_left(const Run *r) {
    uint64_t left = 0;
    for (int i = 0; i < r->n_hash; i++) left += r->hash[i].size;
    return left - atomic_load(&r->hashed);
}

int installer_run(Installer *in, FetchPlan *p, const char *what, int verify) {
    if (p->n == 0 || in->unmanaged) return 0;
    if (!in->has_source)
        return df_fail("%s lacks %s of the model and fetching is off (K3_OFFLINE=1): run `deltafin fetch --root %s` "
                       "where the source can be reached",
                       in->root, what, in->root);
    if (installer_may_fetch(in) || open_planned_shards(in, p)) return -1;
    Run r = {.in = in, .plan = p};
    pthread_mutex_init(&r.mu, NULL);
    r.job_written = df_calloc((size_t)p->n, sizeof *r.job_written);
    r.job_recorded = df_calloc((size_t)p->n, sizeof *r.job_recorded);
    if (verify) plan_hashes(&r);
    uint64_t resumed = 0; /* present bytes of the shards hashed: read back from disk */
    for (int i = 0; i < r.n_hash; i++) resumed += manifest_present_bytes(&in->man, r.hash[i].e);
    int nt = in->src.parallel < p->n ? in->src.parallel : p->n;
    pthread_t *th = df_malloc(sizeof *th * (size_t)nt), hth;
    atomic_store(&r.running, nt);
    int started = 0, err = 0;
    while (started < nt && !(err = pthread_create(&th[started], NULL, worker, &r))) started++;
    if (err) {
        atomic_store(&r.stop, 1); /* the started workers finish their current range and leave */
        atomic_fetch_sub(&r.running, nt - started);
    }
    /* without the hashing thread the shards are hashed by the verification pass instead */
    if (r.n_hash && pthread_create(&hth, NULL, hasher, &r) != 0) drop_hashes(&r);
    Progress pr;
    progress_start(&pr, what, p->bytes);
    if (resumed > (64u << 20)) /* a resumed download, not just the headers setup wrote */
        fprintf(stderr, "deltafin: %s: hashing the %s already present while the rest downloads\n", what,
                fmt_bytes((char[32]){0}, 32, resumed));
    int rc = 0;
    double last_commit = df_now(), last_partial = last_commit;
    uint64_t handed = 0;
    while (atomic_load(&r.running) > 0) {
        sleep_ms(20);
        if (df_now() - last_commit < 0.25) continue;
        last_commit = df_now();
        if (last_commit - last_partial >= PARTIAL_EVERY_S) last_partial = last_commit, handed = record_prefixes(&r);
        if (!rc && manifest_commit(&in->man)) rc = -1, atomic_store(&r.stop, 1);
        if (!rc) progress_saved(&pr, handed);
        progress_show(&pr, atomic_load(&r.received), 0);
    }
    if (!rc && *r.err) record_prefixes(&r); /* a failed run keeps what its ranges received */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    if (!rc && !*r.err) progress_show(&pr, p->bytes, 1);
    atomic_store(&r.downloads_over, 1);
    if (r.n_hash) {
        /* what the hasher has left once the bytes are in: the tail of the last chunks, or, for a
         * resumed shard, whatever of its old bytes it has not reached yet */
        uint64_t left = hash_bytes_left(&r);
        Progress vp;
        progress_start(&vp, "verifying SHA-256", left);
        uint64_t base = atomic_load(&r.hashed);
        while (!atomic_load(&r.hashing_over)) {
            sleep_ms(20);
            if (left > (256u << 20)) progress_show(&vp, atomic_load(&r.hashed) - base, 0);
        }
        pthread_join(hth, NULL);
        if (left > (256u << 20)) progress_show(&vp, left, 1);
    }
    if (!rc && r.n_hash) rc = finish_hashes(&r);
    else drop_hashes(&r);
    free(r.job_written), free(r.job_recorded);
    if (!rc) rc = manifest_commit(&in->man);
    if (!rc && err) rc = df_fail("cannot start a fetch thread: %s", strerror(err));
    else if (rc) manifest_commit(&in->man); /* keep what was fetched, and any reset */
    if (!rc && *r.err) rc = df_fail("%s", r.err);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

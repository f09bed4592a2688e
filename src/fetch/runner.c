/* runner.c - fetching a plan: worker threads, each with its own keep-alive connection, take jobs
 * in order; bytes go straight into the sparse shards; the main thread commits finished ranges to
 * the manifest four times a second (fdatasync first) and shows progress. The first job that fails
 * for good stops the others after their current job; everything finished is kept. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "fetch/installer_int.h"
#include "fetch/progress.h"
#include "fetch/sha256.h"
#include "util/clock.h"
#include "util/err.h"

typedef struct {
    Installer *in;
    FetchPlan *plan;
    _Atomic int next, stop, running;
    _Atomic uint64_t received;
    pthread_mutex_t mu;
    char err[1024];
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
        FetchJob *j = &r->plan->job[k];
        ManifestFile *f = &in->man.f[j->file];
        if (http_range_retry(c, f->name, j->begin, j->end - j->begin, f->size, f->fd, NULL, NULL) == 0) {
            manifest_add_written(&in->man, j->file, j->begin, j->end);
            continue;
        }
        fail_run(r);
    }
    conn_free(c);
    atomic_fetch_sub(&r->running, 1);
    return NULL;
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

int installer_run(Installer *in, FetchPlan *p, const char *what) {
    if (!in->has_source) return df_fail("installer opened without a source");
    if (p->n == 0 || in->unmanaged) return 0;
    for (int s = 0; s < in->cat->n_shards; s++)
        if (installer_open_shard(in, s)) return -1;
    Run r = {.in = in, .plan = p};
    pthread_mutex_init(&r.mu, NULL);
    int nt = in->src.parallel < p->n ? in->src.parallel : p->n;
    pthread_t *th = df_malloc(sizeof *th * (size_t)nt);
    atomic_store(&r.running, nt);
    int started = 0, err = 0;
    while (started < nt && !(err = pthread_create(&th[started], NULL, worker, &r))) started++;
    if (err) {
        atomic_store(&r.stop, 1); /* the started workers finish their current range and leave */
        atomic_fetch_sub(&r.running, nt - started);
    }
    Progress pr;
    progress_start(&pr, what, p->bytes);
    int rc = 0;
    double last_commit = df_now();
    while (atomic_load(&r.running) > 0) {
        sleep_ms(20);
        if (df_now() - last_commit < 0.25) continue;
        last_commit = df_now();
        if (!rc && manifest_commit(&in->man)) rc = -1, atomic_store(&r.stop, 1);
        progress_show(&pr, atomic_load(&r.received), 0);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    if (!rc) rc = manifest_commit(&in->man);
    if (!rc && err) rc = df_fail("cannot start a fetch thread: %s", strerror(err));
    if (!rc && *r.err) rc = df_fail("%s", r.err);
    if (!rc) progress_show(&pr, p->bytes, 1);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

int installer_verify(Installer *in, int *checked, int *unpublished) {
    *checked = *unpublished = 0;
    if (in->unmanaged) return 0;
    for (int s = 0; s < in->cat->n_shards; s++) {
        int e = in->shard_entry[s];
        ManifestFile *f = &in->man.f[e];
        if (!manifest_has(&in->man, e, 0, f->size)) continue;
        if (!*f->sha256) {
            (*unpublished)++;
            continue;
        }
        if (f->verified) {
            (*checked)++;
            continue;
        }
        if (installer_open_shard(in, s)) return -1;
        char hex[65];
        if (sha256_file(f->fd, f->size, hex, f->name)) return -1;
        if (strcmp(hex, f->sha256)) {
            manifest_reset(&in->man, e);
            manifest_commit(&in->man);
            return df_fail("%s: SHA-256 %s does not match the published %s; its bytes were discarded, run setup again",
                           f->name, hex, f->sha256);
        }
        manifest_set_verified(&in->man, e, 1);
        (*checked)++;
    }
    return manifest_commit(&in->man);
}

/* ondemand.c - one expert at a time for the streaming store: thread-safe, several in flight,
 * one transfer per expert however many threads ask for it. Idle connections are pooled so
 * consecutive fetches reuse their keep-alive connections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/progress.h"

#include "fetch/installer_int.h"
#include "util/clock.h"
#include "util/err.h"

static int span_of(Installer *in, int layer, int expert, const ExpertSpan **sp) {
    const K3Config *c = &in->cat->cfg;
    if (layer < c->first_dense || layer >= c->n_layers || expert < 0 || expert >= c->n_experts)
        return df_fail("expert %d of layer %d: no such routed expert", expert, layer);
    *sp = catalog_expert(in->cat, layer, expert);
    return 0;
}

int installer_has_expert(Installer *in, int layer, int expert) {
    const ExpertSpan *sp = NULL;
    if (span_of(in, layer, expert, &sp)) return 0;
    if (in->unmanaged) return 1;
    return manifest_has(&in->man, in->shard_entry[sp->shard], sp->offset, sp->offset + in->cat->expert_bytes);
}

void installer_expert_counts(Installer *in, uint64_t *present, uint64_t *total) {
    const K3Config *c = &in->cat->cfg;
    *present = *total = 0;
    for (int l = c->first_dense; l < c->n_layers; l++)
        for (int x = 0; x < c->n_experts; x++) *total += 1, *present += (uint64_t)installer_has_expert(in, l, x);
}

static int inflight_index(Installer *in, int64_t key) {
    for (int i = 0; i < in->n_inflight; i++)
        if (in->inflight[i] == key) return i;
    return -1;
}

static Conn *take_conn(Installer *in) {
    pthread_mutex_lock(&in->mu);
    Conn *c = in->n_idle ? in->idle[--in->n_idle] : NULL;
    pthread_mutex_unlock(&in->mu);
    return c ? c : conn_new(&in->src, in->urls);
}

static void give_conn(Installer *in, Conn *c) {
    pthread_mutex_lock(&in->mu);
    in->idle = df_realloc(in->idle, sizeof *in->idle * (size_t)(in->n_idle + 1));
    in->idle[in->n_idle++] = c;
    pthread_mutex_unlock(&in->mu);
}

int installer_fetch_expert(Installer *in, int layer, int expert) {
    const ExpertSpan *sp = NULL;
    if (span_of(in, layer, expert, &sp)) return -1;
    if (in->unmanaged) return 0;
    if (!in->has_source)
        return df_fail("expert %d of layer %d is not installed and fetching is off (K3_OFFLINE=1): run `deltafin fetch "
                       "--root %s` where the source can be reached",
                       expert, layer, in->root);
    int e = in->shard_entry[sp->shard];
    uint64_t begin = sp->offset, end = begin + in->cat->expert_bytes;
    if (!manifest_has(&in->man, e, begin, end) && installer_may_fetch(in)) return -1;
    int64_t key = (int64_t)layer * in->cat->cfg.n_experts + expert;
    pthread_mutex_lock(&in->mu);
    while (inflight_index(in, key) >= 0) pthread_cond_wait(&in->cv, &in->mu);
    if (manifest_has(&in->man, e, begin, end)) {
        pthread_mutex_unlock(&in->mu);
        return 0;
    }
    if (in->n_inflight == in->cap_inflight) {
        in->cap_inflight = in->cap_inflight ? 2 * in->cap_inflight : 16;
        in->inflight = df_realloc(in->inflight, sizeof *in->inflight * (size_t)in->cap_inflight);
    }
    in->inflight[in->n_inflight++] = key;
    pthread_mutex_unlock(&in->mu);

    pthread_mutex_lock(&in->mu);
    int rc = installer_open_shard(in, sp->shard);
    pthread_mutex_unlock(&in->mu);
    Conn *c = rc ? NULL : take_conn(in);
    if (!rc && !c) rc = -1;
    ManifestFile *f = &in->man.f[e];
    RemoteInfo expect;
    installer_expect(in, e, &expect);
    if (!rc) rc = http_range_retry(c, f->name, begin, end - begin, &expect, f->fd, NULL, NULL);
    if (c) give_conn(in, c);
    if (!rc) manifest_add_written(&in->man, e, begin, end); /* usable now, durable at the commit */

    pthread_mutex_lock(&in->mu);
    int slot = inflight_index(in, key);
    in->inflight[slot] = in->inflight[--in->n_inflight];
    /* group commit: the last fetch of a burst (a layer's experts) records the whole burst, and a
     * long burst is recorded at least twice a second */
    int commit = !rc && (in->n_inflight == 0 || df_now() - in->last_commit >= 0.5);
    if (commit) in->last_commit = df_now();
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
    if (commit) rc = manifest_commit(&in->man);
    if (rc) df_failctx("fetching expert %d of layer %d", expert, layer);
    return rc;
}

void installer_reminder(Installer *in, char *buf, size_t len) {
    uint64_t have, total;
    installer_expert_counts(in, &have, &total);
    if (have == total) {
        snprintf(buf, len, "%s", "");
        return;
    }
    char cost[32], how[200] = "missing experts are fetched on demand";
    int err;
    /* what happens to a missing expert, said truthfully: fetched, or an error, and why */
    if (!in->has_source) snprintf(how, sizeof how, "fetching is off (K3_OFFLINE=1): a missing expert is an error");
    else if (*in->no_fetch)
        snprintf(how, sizeof how, "the settings name another source or revision than the install's: a missing expert is "
                 "an error (deltafin doctor says more)");
    else if ((err = installer_write_errno(in->root)))
        snprintf(how, sizeof how, "the install is not writable here (%s): a missing expert is an error", strerror(err));
    snprintf(buf, len,
             "streaming install: %llu of %llu experts local (%.1f%%); %s. Finishing costs %s: deltafin fetch --root %s",
             (unsigned long long)have, (unsigned long long)total, total ? 100.0 * have / total : 100.0, how,
             fmt_bytes(cost, sizeof cost, (total - have) * in->cat->expert_bytes), in->root);
}

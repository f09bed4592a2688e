#include "store/fetching.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* Fetches the missing ones among ids[0..n) of `layer` (ids may repeat). */
static int fetch_missing(FetchingSource *fs, int layer, const int *ids, int n) {
    int *layers = df_malloc(sizeof *layers * (size_t)(n ? n : 1)), *missing = df_malloc(sizeof *missing * (size_t)(n ? n : 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < m && !dup; j++) dup = missing[j] == ids[i];
        if (!dup && !installer_has_expert(fs->inst, layer, ids[i])) layers[m] = layer, missing[m++] = ids[i];
    }
    int rc = 0;
    if (m > 0) {
        FetchPlan plan = {0};
        char what[64];
        plan_experts(fs->inst, layers, missing, m, &plan);
        snprintf(what, sizeof what, "fetching %d expert%s of layer %d", m, m == 1 ? "" : "s", layer);
        rc = installer_run(fs->inst, &plan, what, 0); /* a generation waits: no hashing here */
        plan_free(&plan);
        for (int i = 0; i < m && !rc; i++)
            if (!installer_has_expert(fs->inst, layer, missing[i]))
                rc = df_fail("expert %d of layer %d is not installed and could not be fetched", missing[i], layer);
        if (rc) df_failctx("layer %d needs experts this install does not hold", layer);
        else fs->fetched += (uint64_t)m;
    }
    free(layers), free(missing);
    return rc;
}

static void fetching_route(ExpertSource *src, int layer, const int *sel, int T, int k) {
    FetchingSource *fs = (FetchingSource *)src;
    if (fetch_missing(fs, layer, sel, T * k)) fs->failed = 1; /* the acquire that follows reports it */
    else if (fs->wrap.inner->route) fs->wrap.inner->route(fs->wrap.inner, layer, sel, T, k);
}

/* A guess never fetches: only the guessed experts already installed go on to be read ahead. (The
 * model guesses only for decode steps and verify passes: T <= MODEL_MAX_VERIFY.) */
static void fetching_predict(ExpertSource *src, int layer, const int *sel, int T, int k) {
    FetchingSource *fs = (FetchingSource *)src;
    int have[MODEL_MAX_VERIFY * K3_MAX_TOP_K];
    for (int i = 0; i < T * k; i++) have[i] = installer_has_expert(fs->inst, layer, sel[i]) ? sel[i] : -1;
    fs->wrap.inner->predict(fs->wrap.inner, layer, have, T, k);
}

static int fetching_acquire(ExpertSource *src, int layer, const int *ids, int n, ExpertMats *out) {
    FetchingSource *fs = (FetchingSource *)src;
    if (fs->failed) {
        fs->failed = 0;
        return -1;
    }
    if (fetch_missing(fs, layer, ids, n)) return -1;
    return fs->wrap.inner->acquire(fs->wrap.inner, layer, ids, n, out);
}

void fetching_wrap(FetchingSource *fs, ExpertSource *inner, Installer *inst) {
    memset(fs, 0, sizeof *fs);
    expert_wrap_init(&fs->wrap, inner);
    fs->wrap.src.acquire = fetching_acquire;
    fs->wrap.src.route = fetching_route;
    fs->wrap.src.predict = inner->predict ? fetching_predict : NULL;
    fs->inst = inst;
}

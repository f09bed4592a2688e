/* bench_expert_fetch - per-expert on-demand fetch latency through installer_fetch_expert, the
 * call the streaming store makes for a missing expert.
 *
 * usage: bench_expert_fetch ROOT N THREADS [--dup]
 * ROOT is an install (setup --stream) whose source is reachable (K3_HF_HOST...). Fetches N missing
 * experts, spread over layers, from THREADS threads at once (a layer's experts are wanted together),
 * then checks each is recorded. --dup asks for every expert twice, from different threads, to show
 * that concurrent requests for one expert share one transfer. Prints p50/p99/mean latency. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/settings.h"
#include "fetch/installer.h"
#include "util/clock.h"
#include "util/err.h"

typedef struct {
    Installer *in;
    int *layer, *expert, n;
    double *lat;
    _Atomic int next, failed;
} Bench;

static void *worker(void *arg) {
    Bench *b = arg;
    for (int k; (k = atomic_fetch_add(&b->next, 1)) < b->n;) {
        double t0 = df_now();
        if (installer_fetch_expert(b->in, b->layer[k], b->expert[k])) {
            fprintf(stderr, "bench_expert_fetch: %s\n", df_errmsg());
            atomic_store(&b->failed, 1);
        }
        b->lat[k] = df_now() - t0;
    }
    return NULL;
}

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_expert_fetch ROOT N THREADS [--dup]\n");
        return 2;
    }
    int want = atoi(argv[2]), threads = atoi(argv[3]), dup = argc > 4 && !strcmp(argv[4], "--dup");
    if (want < 1 || threads < 1 || threads > 256) return fprintf(stderr, "bad N or THREADS\n"), 2;
    /* as the run-time store does: its own catalog, the installer attached to it */
    Catalog cat_own;
    Installer *in;
    Settings set; /* the source: K3_HF_*, K3_FETCH_* */
    if (settings_from_env(&set) || catalog_open(&cat_own, argv[1]) ||
        installer_attach(&in, &cat_own, INST_ONLINE, &set.engine.fetch))
        return fprintf(stderr, "%s\n", df_errmsg()), 1;
    const Catalog *cat = &cat_own;
    const K3Config *c = &cat->cfg;
    Bench b = {.in = in};
    b.layer = malloc(sizeof(int) * (size_t)want * 2), b.expert = malloc(sizeof(int) * (size_t)want * 2);
    /* a fixed permutation of all (layer, expert) pairs, so requests are not physically adjacent */
    const int L = c->n_layers - c->first_dense;
    const long all = (long)L * c->n_experts;
    long step = 7919;
    while (gcd(step, all) != 1) step++;
    for (long i = 0; i < all && b.n < want * (1 + dup); i++) {
        long k = (i * step) % all;
        int l = c->first_dense + (int)(k / c->n_experts), x = (int)(k % c->n_experts);
        if (installer_has_expert(in, l, x)) continue;
        for (int d = 0; d <= dup; d++) b.layer[b.n] = l, b.expert[b.n++] = x;
    }
    if (b.n == 0) return fprintf(stderr, "no missing experts left in %s\n", argv[1]), 1;
    b.lat = calloc((size_t)b.n, sizeof *b.lat);
    pthread_t th[256];
    double t0 = df_now();
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, worker, &b);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double el = df_now() - t0;
    int missing = 0;
    for (int i = 0; i < b.n; i++) missing += !installer_has_expert(in, b.layer[i], b.expert[i]);
    qsort(b.lat, (size_t)b.n, sizeof *b.lat, cmp_d);
    double sum = 0;
    for (int i = 0; i < b.n; i++) sum += b.lat[i];
    int distinct = b.n / (1 + dup);
    printf("experts=%d requests=%d threads=%d expert_bytes=%llu p50_ms=%.2f p99_ms=%.2f mean_ms=%.2f total_s=%.3f "
           "MB_per_s=%.1f not_recorded=%d\n",
           distinct, b.n, threads, (unsigned long long)cat->expert_bytes, 1e3 * b.lat[b.n / 2],
           1e3 * b.lat[(b.n * 99) / 100 < b.n ? (b.n * 99) / 100 : b.n - 1], 1e3 * sum / b.n, el,
           distinct * (double)cat->expert_bytes / el / 1e6, missing);
    char reminder[512];
    installer_reminder(in, reminder, sizeof reminder);
    printf("%s\n", reminder);
    installer_close(in);
    catalog_free(&cat_own);
    free(b.layer), free(b.expert), free(b.lat);
    return b.failed || missing ? 1 : 0;
}

/* bench_io - the streaming store's expert reads through the I/O pool: threads against io_uring
 * (plain and with registered buffers), on the same O_DIRECT reads of whole expert spans.
 *
 *   build/bench/bench_io MODEL_DIR [ROUNDS] [DEPTH] [MB_PER_ROUND]      (defaults 5 16 256)
 *
 * Each round takes a fresh set of random experts (no expert is read twice in a run, so a cache
 * below the file system sees each once) and reads them with every configuration in turn, the
 * order rotating from round to round, in two patterns:
 *   layer   batches of 16 submitted at once and waited for, as a decode step reads one layer's
 *           missing experts (the time a layer waits);
 *   stream  every read of the round submitted at once (the device's throughput).
 * Printed per configuration: median and range over rounds of GB/s, the median time of a 16-read
 * batch, and CPU seconds (user + system, all threads of the process) per GB read. The buffers are
 * prepared (MADV_POPULATE_WRITE) except in the configuration "threads, fresh pages", which reads into a
 * mapping nobody has touched yet, as the expert cache's first reads would without its populate
 * thread: the kernel then provides each page inside the read. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "bench_util.h"
#include "format/catalog.h"
#include "store/iopool.h"
#include "util/err.h"
#include "util/platform.h"

#define BATCH 16

typedef struct {
    IoJob job;
    struct Waiter *w;
    int layer, expert;
} Read;

typedef struct Waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, failed;
} Waiter;

static void describe(const IoJob *job, char *what, size_t n) {
    const Read *r = (const Read *)job;
    snprintf(what, n, "layer %d expert %d", r->layer, r->expert);
}

static void done(IoJob *job, int rc) {
    Waiter *w = ((Read *)job)->w;
    if (rc) fprintf(stderr, "bench_io: %s\n", df_errmsg());
    pthread_mutex_lock(&w->mu);
    w->failed |= rc != 0;
    if (--w->pending == 0) pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* Reads reads[0..n) in groups of `group` (n: all at once); returns seconds, adds batch times. */
static double read_all(IoPool *p, Read *reads, int n, int group, Waiter *w, double *batch_s, int *n_batch) {
    double t0 = df_now();
    IoJob *jobs[4096];
    for (int at = 0; at < n; at += group) {
        int k = n - at < group ? n - at : group;
        double b0 = df_now();
        pthread_mutex_lock(&w->mu);
        w->pending = k;
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < k; i++) jobs[i] = &reads[at + i].job;
        iopool_submit_many(p, jobs, k, IO_URGENT);
        pthread_mutex_lock(&w->mu);
        while (w->pending > 0) pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        if (batch_s && k == BATCH) batch_s[(*n_batch)++] = df_now() - b0;
    }
    return df_now() - t0;
}

enum { C_THREADS, C_URING, C_URING_FIXED, C_FRESH, N_CONF };
static const char *const CONF[N_CONF] = {"threads", "io_uring", "io_uring + registered buffers", "threads, fresh pages"};

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n ? v[n / 2] : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL_DIR [ROUNDS] [DEPTH] [MB_PER_ROUND]\n", argv[0]), 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 5, depth = argc > 3 ? atoi(argv[3]) : 16;
    double mb = argc > 4 ? atof(argv[4]) : 256;
    if (rounds < 1 || rounds > 64 || depth < 1 || depth > 256) return fprintf(stderr, "ROUNDS 1..64, DEPTH 1..256\n"), 2;
    Catalog cat;
    Shards sh;
    if (catalog_open(&cat, argv[1]) || shards_open(&sh, &cat, 1)) return fprintf(stderr, "%s\n", df_errmsg()), 1;
    const K3Config *c = &cat.cfg;
    uint64_t slot = shard_read_cap(SHARD_ALIGN - 1, cat.expert_bytes);
    int per_round = (int)(mb * 1e6 / (double)slot), total = (c->n_layers - c->first_dense) * c->n_experts;
    if (per_round < BATCH || per_round > 4096) return fprintf(stderr, "MB_PER_ROUND gives %d reads (16..4096)\n", per_round), 2;
    if ((long)per_round * rounds * N_CONF * 2 > total) return fprintf(stderr, "the model has too few experts for this run\n"), 2;
    size_t arena_bytes = (size_t)per_round * slot;
    uint8_t *arena = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) return perror("mmap"), 1;
    if (plat_prefault(arena, arena_bytes) != 0) memset(arena, 0, arena_bytes); /* every page there before the reads */
    /* every expert once, in a fixed random order */
    int *order = df_malloc(sizeof *order * (size_t)total);
    for (int i = 0; i < total; i++) order[i] = i;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int i = total - 1; i > 0; i--) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int j = (int)(rng % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    IoPool *pool[N_CONF];
    for (int k = 0; k < N_CONF; k++)
        if (iopool_create(&pool[k], k == C_THREADS || k == C_FRESH ? IO_THREADS : IO_URING, depth)) return fprintf(stderr, "%s\n", df_errmsg()), 1;
    if (iopool_register_buffers(pool[C_URING_FIXED], arena, arena_bytes)) return fprintf(stderr, "%s\n", df_errmsg()), 1;
    Read *reads = df_calloc((size_t)per_round, sizeof *reads);
    Waiter w = {.pending = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    double gbs[2][N_CONF][64], cpu[2][N_CONF][64], *batch = df_malloc(sizeof *batch * (size_t)rounds * N_CONF * per_round);
    int n_batch[N_CONF] = {0}, next = 0;
    double *batch_of[N_CONF];
    for (int k = 0; k < N_CONF; k++) batch_of[k] = batch + (size_t)k * rounds * per_round;
    printf("bench_io: %s, %d reads of %llu B per round and pattern, depth %d, %d rounds\n", argv[1], per_round,
           (unsigned long long)slot, depth, rounds);
    for (int r = 0; r < rounds; r++)
        for (int pat = 0; pat < 2; pat++)
            for (int i = 0; i < N_CONF; i++) {
                int k = (i + r) % N_CONF;
                uint8_t *dst = arena;
                if (k == C_FRESH) {
                    dst = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    if (dst == MAP_FAILED) return perror("mmap"), 1;
                }
                for (int j = 0; j < per_round; j++, next++) {
                    int e = order[next];
                    Read *rd = &reads[j];
                    rd->layer = c->first_dense + e / c->n_experts, rd->expert = e % c->n_experts, rd->w = &w;
                    const ExpertSpan *sp = catalog_expert(&cat, rd->layer, rd->expert);
                    rd->job = (IoJob){.files = &sh, .file = sp->shard, .aoff = sp->offset & ~(uint64_t)(SHARD_ALIGN - 1),
                                      .alen = shard_read_cap(sp->offset, cat.expert_bytes), .buf = dst + (size_t)j * slot,
                                      .done = done, .describe = describe};
                    rd->job.need = sp->offset + cat.expert_bytes - rd->job.aoff;
                }
                double c0 = cpu_seconds();
                double s = read_all(pool[k], reads, per_round, pat == 0 ? BATCH : per_round, &w, pat == 0 ? batch_of[k] : NULL,
                                    &n_batch[k]);
                double gb = (double)per_round * slot / 1e9;
                gbs[pat][k][r] = gb / s, cpu[pat][k][r] = (cpu_seconds() - c0) / gb;
                if (dst != arena) munmap(dst, arena_bytes);
                if (w.failed) return 1;
            }
    for (int pat = 0; pat < 2; pat++) {
        printf("%s pattern:\n", pat == 0 ? "layer (batches of 16)" : "stream (a round at once)");
        for (int k = 0; k < N_CONF; k++) {
            double lo = 1e30, hi = 0;
            for (int r = 0; r < rounds; r++) lo = gbs[pat][k][r] < lo ? gbs[pat][k][r] : lo, hi = gbs[pat][k][r] > hi ? gbs[pat][k][r] : hi;
            printf("  %-30s %.3f GB/s (%.3f..%.3f), CPU %.3f s per GB", CONF[k], median(gbs[pat][k], rounds), lo, hi,
                   median(cpu[pat][k], rounds));
            if (pat == 0) printf(", batch of 16: %.2f ms", 1e3 * median(batch_of[k], n_batch[k]));
            printf("\n");
        }
    }
    for (int k = 0; k < N_CONF; k++) iopool_destroy(pool[k]);
    munmap(arena, arena_bytes);
    free(order), free(reads), free(batch);
    shards_close(&sh);
    catalog_free(&cat);
    return 0;
}

/* bench_kernels - matrix kernel throughput against the machine's read bandwidth.
 *
 * Weights are cycled through a buffer far larger than the last-level cache (default 1 GiB), so
 * each matrix comes from DRAM as it would in decode. Reports, for one thread and for all cores:
 * the read bandwidth of a plain streaming sum over the same buffer, and for BF16 7168x7168 (the
 * attention/shared-expert shape) and MXFP4 3072x3584 (one routed expert matrix) the weight bytes
 * per second at T = 1 (decode) and T = 8 (verification), as medians over several passes. Then many
 * rows (a prefill window, --rows N, default 256): GFLOP/s with the weights in cache, beside the
 * machine's fp32 FMA peak (a register-only loop of independent fused multiply-adds on every thread).
 *
 * usage: bench_kernels [--mb N] [--runs N] [--threads N] [--rows N] [--format bf16|mxfp4]
 * (K3_KERNELS=avx2 or portable measures that path) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cli/die.h"
#include "format/numfmt.h"
#include "kernels/kernels_impl.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/rng.h"

#if KERN_HAVE_X86
#include <immintrin.h>
#endif

typedef struct {
    uint8_t *buf;
    size_t bytes;
    int runs;
} Bench;

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- read bandwidth: a streaming sum, one 1 MiB slice per pool task ---- */

#define SLICE (1u << 20)
static volatile uint64_t sink;

#if KERN_HAVE_X86
__attribute__((target("avx2"))) static uint64_t sum_slice_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return out[0] + out[1] + out[2] + out[3];
}
#endif

static uint64_t sum_slice(const uint8_t *p, size_t n) {
#if KERN_HAVE_X86
    if (kern_isa_available(KERN_AVX2)) return sum_slice_avx2(p, n);
#endif
    uint64_t a[4] = {0}, v;
    for (size_t i = 0; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) memcpy(&v, p + i + 8 * k, 8), a[k] += v;
    return a[0] + a[1] + a[2] + a[3];
}

static void sum_task(void *ctx, int task) {
    const Bench *b = ctx;
    sink += sum_slice(b->buf + (size_t)task * SLICE, SLICE);
}

/* Seconds for one streaming pass over the whole buffer. */
static double read_pass(const Bench *b, Pool *pool) {
    double t0 = df_now();
    pool_run(pool, (int)(b->bytes / SLICE), sum_task, (void *)b);
    return df_now() - t0;
}

/* ---- the kernels over every matrix in the buffer ---- */

typedef struct {
    const char *name;
    int rows, cols;
    int mxfp4;
} Shape;

static size_t mat_bytes(const Shape *s) {
    size_t n = (size_t)s->rows * (size_t)s->cols;
    return s->mxfp4 ? n / 2 + n / 32 : 2 * n;
}

static void fill_weights(Bench *b, const Shape *s) {
    Rng r;
    rng_seed(&r, 7);
    size_t per = mat_bytes(s), n_mat = b->bytes / per, n = (size_t)s->rows * (size_t)s->cols;
    for (size_t m = 0; m < n_mat; m++) {
        uint8_t *base = b->buf + m * per;
        if (s->mxfp4) {
            for (size_t i = 0; i < n / 2; i += 8) {
                uint64_t v = rng_next(&r);
                memcpy(base + i, &v, 8);
            }
            for (size_t i = 0; i < n / 32; i++) base[n / 2 + i] = (uint8_t)(118 + rng_next(&r) % 8);
        } else {
            uint16_t *w = (uint16_t *)base; /* normal numbers of magnitude 2^-12 .. 2^-2, like real weights */
            for (size_t i = 0; i < n; i++) {
                uint64_t v = rng_next(&r);
                w[i] = (uint16_t)((v & 0x8000) | (uint16_t)((115 + v % 10) << 7) | ((v >> 8) & 0x7f));
            }
        }
    }
}

/* Seconds for one pass of the kernel over every matrix in the buffer. */
static double kernel_pass(const Bench *b, const Shape *s, Pool *pool, const float *X, float *Y, int T) {
    size_t per = mat_bytes(s), n_mat = b->bytes / per, n = (size_t)s->rows * (size_t)s->cols;
    double t0 = df_now();
    for (size_t m = 0; m < n_mat; m++) {
        const uint8_t *base = b->buf + m * per;
        if (s->mxfp4)
            kern_matmul_mxfp4(pool, Y, base, base + n / 2, X, T, s->rows, s->cols);
        else
            kern_matmul_bf16(pool, Y, (const uint16_t *)base, X, T, s->rows, s->cols);
    }
    return df_now() - t0;
}

/* Medians over runs of: read bandwidth, kernel weight bandwidth, and their ratio. Each run times a
 * streaming read right before the kernel pass, so the ratio holds up on a machine whose load (and
 * so bandwidth) drifts during the benchmark. */
typedef struct {
    double read_gbs, kern_gbs, ratio, gflops;
} Result;

static Result measure(const Bench *b, const Shape *s, Pool *pool, const float *X, float *Y, int T) {
    size_t per = mat_bytes(s), n_mat = b->bytes / per;
    double weight_bytes = (double)(per * n_mat), flop = 2.0 * T * (double)s->rows * (double)s->cols * (double)n_mat;
    double rd[64], kn[64], ratio[64], fl[64];
    for (int r = 0; r < b->runs; r++) {
        double tr = read_pass(b, pool), tk = kernel_pass(b, s, pool, X, Y, T);
        rd[r] = (double)b->bytes / tr * 1e-9, kn[r] = weight_bytes / tk * 1e-9, fl[r] = flop / tk * 1e-9;
        ratio[r] = kn[r] / rd[r];
    }
    return (Result){median(rd, b->runs), median(kn, b->runs), median(ratio, b->runs), median(fl, b->runs)};
}

static void bench_shape(Bench *b, const Shape *s, Pool **pools, int n_pools) {
    fill_weights(b, s);
    Rng r;
    rng_seed(&r, 3);
    float *X = df_malloc(sizeof(float) * 8 * (size_t)s->cols), *Y = df_malloc(sizeof(float) * 8 * (size_t)s->rows);
    for (int i = 0; i < 8 * s->cols; i++) X[i] = (float)((double)(rng_next(&r) >> 11) * 0x1p-53 * 2 - 1);
    for (int T = 1; T <= 8; T += 7) {
        for (int p = 0; p < n_pools; p++) {
            Result res = measure(b, s, pools[p], X, Y, T);
            printf("%-5s %4dx%-4d T=%d  %2d thread%s  %6.2f GB/s  %5.1f GFLOP/s  read %6.2f GB/s  kernel/read %3.0f%%\n",
                   s->name, s->rows, s->cols, T, pool_threads(pools[p]), pool_threads(pools[p]) > 1 ? "s" : " ",
                   res.kern_gbs, res.gflops, res.read_gbs, 100 * res.ratio);
            fflush(stdout);
        }
    }
    free(X), free(Y);
}

/* ---- the arithmetic peak: independent FMA chains in registers, one pool task per thread ---- */

enum { PEAK_ITERS = 1 << 22 };

#if KERN_HAVE_X86 /* (elsewhere the peak is not measured: 0) */
static volatile float peak_sink;

__attribute__((target("avx512f"))) static void peak_avx512(void) {
    __m512 a[12], x = _mm512_set1_ps(0.9999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (int n = 0; n < PEAK_ITERS; n++) {
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(a[i]);
    peak_sink = s;
}
__attribute__((target("avx2,fma"))) static void peak_avx2(void) {
    __m256 a[12], x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (int n = 0; n < PEAK_ITERS; n++) {
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    }
    float out[8], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(out, a[i]);
        for (int k = 0; k < 8; k++) s += out[k];
    }
    peak_sink = s;
}

static void peak_task(void *ctx, int task) {
    (void)ctx, (void)task;
    if (kern_selected() == KERN_AVX512) peak_avx512();
    else if (kern_selected() == KERN_AVX2) peak_avx2();
}
#endif

/* GFLOP/s of the FMA loop on every thread of the pool (0 where the portable path runs). */
static double fma_peak(Pool *pool) {
#if KERN_HAVE_X86
    const int lanes = kern_selected() == KERN_AVX512 ? 16 : kern_selected() == KERN_AVX2 ? 8 : 0;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = df_now();
        pool_run(pool, pool_threads(pool), peak_task, NULL);
        double g = 2.0 * 12 * lanes * PEAK_ITERS * pool_threads(pool) / (df_now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
#else
    (void)pool;
    return 0;
#endif
}

/* A prefill window's products: T rows through one matrix of each kind again and again (the weights
 * stay in cache: this measures the arithmetic), against the FMA peak. */
static void bench_many_rows(const Shape *s, Pool *pool, int T, int runs, double peak) {
    Bench one = {.bytes = mat_bytes(s), .runs = runs};
    one.buf = df_aligned_alloc(64, one.bytes);
    fill_weights(&one, s);
    Rng r;
    rng_seed(&r, 5);
    float *X = df_malloc(sizeof(float) * (size_t)T * (size_t)s->cols), *Y = df_malloc(sizeof(float) * (size_t)T * (size_t)s->rows);
    for (size_t i = 0; i < (size_t)T * (size_t)s->cols; i++) X[i] = (float)((double)(rng_next(&r) >> 11) * 0x1p-53 * 2 - 1);
    double g[64];
    for (int k = 0; k < runs; k++) g[k] = 2.0 * T * s->rows * (double)s->cols / kernel_pass(&one, s, pool, X, Y, T) * 1e-9;
    double med = median(g, runs);
    printf("%-5s %4dx%-4d T=%d  %2d thread%s  %6.1f GFLOP/s  (%.0f%% of the FMA peak %.1f GFLOP/s)\n", s->name, s->rows, s->cols,
           T, pool_threads(pool), pool_threads(pool) > 1 ? "s" : " ", med, peak > 0 ? 100 * med / peak : 0, peak);
    free(X), free(Y), free(one.buf);
}

static void print_cpu(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            printf("cpu:%s", strchr(line, ':') + 1);
            break;
        }
    if (f) fclose(f);
}

static const char *arg_str(int argc, char **argv, const char *name, const char *def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

static long arg_long(int argc, char **argv, const char *name, long def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v < 1) df_die("%s: '%s' is not a positive number", name, argv[i + 1]);
            return v;
        }
    return def;
}

int main(int argc, char **argv) {
    if (argc % 2 == 0) df_die("usage: bench_kernels [--mb N] [--runs N] [--threads N] [--rows N] [--format bf16|mxfp4]");
    const char *only = arg_str(argc, argv, "--format", NULL);
    if (only && strcmp(only, "bf16") && strcmp(only, "mxfp4")) df_die("--format: '%s' is not bf16 or mxfp4", only);
    Bench b = {.bytes = (size_t)arg_long(argc, argv, "--mb", 1024) << 20, .runs = (int)arg_long(argc, argv, "--runs", 5)};
    if (b.runs > 64) b.runs = 64;
    int all = (int)arg_long(argc, argv, "--threads", 0);
    b.buf = df_aligned_alloc(64, b.bytes);
    memset(b.buf, 1, b.bytes); /* fault every page in before timing */
    Pool *pools[2] = {pool_create(1), pool_create(all)};
    int n_pools = pool_threads(pools[1]) > 1 ? 2 : 1;
    print_cpu();
    printf("bench_kernels: %s kernels, %zu MiB of weights per pass, median of %d passes\n", kern_isa(), b.bytes >> 20,
           b.runs);
    const Shape shapes[] = {{"bf16", 7168, 7168, 0}, {"mxfp4", 3072, 3584, 1}};
    for (int s = 0; s < 2; s++)
        if (!only || !strcmp(only, shapes[s].name)) bench_shape(&b, &shapes[s], pools, n_pools);
    const int rows = (int)arg_long(argc, argv, "--rows", 256);
    for (int p = 0; p < n_pools; p++) {
        double peak = fma_peak(pools[p]);
        for (int s = 0; s < 2; s++)
            if (!only || !strcmp(only, shapes[s].name)) bench_many_rows(&shapes[s], pools[p], rows, b.runs, peak);
    }
    pool_destroy(pools[0]), pool_destroy(pools[1]);
    free(b.buf);
    return 0;
}

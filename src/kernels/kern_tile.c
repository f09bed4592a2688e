/* kern_tile.c - the part every kernel shares: row chunks over the thread pool, X-row tiles inside
 * a chunk, the portable row loop and the completion of an output (tail columns, lane sum, store).
 * The order of arithmetic of one output is fixed in kernels_impl.h; nothing here changes it. */
#include "kernels/kernels_impl.h"

/* Weight bytes per chunk: with T > KERN_TT the chunk is read once from memory and then from the
 * core's L2 for every further tile of X rows. */
#define CHUNK_BYTES (256u << 10)
#define CHUNK_MIN_ROWS 4
#define CHUNK_MAX_ROWS 64
/* Chunks per thread when parallel: enough to even out threads that start late. */
#define CHUNKS_PER_THREAD 4

typedef struct {
    const KernJob *j;
    int rows_per_chunk;
} Chunks;

static void run_chunk(void *ctx, int chunk) {
    const Chunks *ch = ctx;
    const KernJob *j = ch->j;
    int r0 = chunk * ch->rows_per_chunk;
    int r1 = r0 + ch->rows_per_chunk < j->rows ? r0 + ch->rows_per_chunk : j->rows;
    for (int t0 = 0; t0 < j->T; t0 += KERN_TT) j->rows_fn(j, r0, r1, t0, j->T - t0 < KERN_TT ? j->T - t0 : KERN_TT);
}

static int rows_per_chunk(const KernJob *j, int threads) {
    size_t per = j->row_bytes ? CHUNK_BYTES / j->row_bytes : CHUNK_MAX_ROWS;
    if (per > CHUNK_MAX_ROWS) per = CHUNK_MAX_ROWS;
    if (threads > 1) {
        size_t even = ((size_t)j->rows + (size_t)threads * CHUNKS_PER_THREAD - 1) / ((size_t)threads * CHUNKS_PER_THREAD);
        if (per > even) per = even;
    }
    if (per >= KERN_TILE_MAX) per -= per % KERN_TILE_MAX; /* whole micro-tiles */
    return per < CHUNK_MIN_ROWS ? CHUNK_MIN_ROWS : (int)per;
}

void kern_run(Pool *pool, const KernJob *j) {
    if (j->T <= 0 || j->rows <= 0) return;
    uint64_t macs = (uint64_t)j->rows * (uint64_t)j->cols * (uint64_t)j->T;
    int threads = macs >= KERN_PARALLEL_MIN_MACS ? pool_threads(pool) : 1;
    Chunks ch = {j, rows_per_chunk(j, threads)};
    int n = (j->rows + ch.rows_per_chunk - 1) / ch.rows_per_chunk;
    if (threads > 1 && n > 1) {
        pool_run(pool, n, run_chunk, &ch);
        return;
    }
    for (int c = 0; c < n; c++) run_chunk(&ch, c);
}

void kern_finish(const KernJob *j, Lanes *acc, int r, int nr, int t0, int nt) {
    const size_t ldx = (size_t)j->cols;
    const int tail = j->cols % KERN_LANES, c = j->cols - tail;
    for (int i = 0; i < nr; i++) {
        Lanes *a = acc + i * nt;
        if (tail) {
            float w[KERN_LANES];
            j->expand(j, r + i, c, tail, w);
            lanes_fma_tail(a, nt, w, j->X + (size_t)t0 * ldx, ldx, (size_t)c, tail);
        }
        for (int t = 0; t < nt; t++) j->Y[(size_t)(t0 + t) * (size_t)j->rows + (size_t)(r + i)] = lanes_sum(&a[t]);
    }
}

void kern_rows_portable(const KernJob *j, int r0, int r1, int t0, int nt) {
    const size_t ldx = (size_t)j->cols;
    const float *X = j->X + (size_t)t0 * ldx;
    for (int r = r0; r < r1; r++) {
        Lanes acc[KERN_TT];
        memset(acc, 0, sizeof acc);
        float w[KERN_LANES];
        for (int c = 0; c + KERN_LANES <= j->cols; c += KERN_LANES) {
            j->expand(j, r, c, KERN_LANES, w);
            lanes_fma(acc, nt, w, X, ldx, (size_t)c);
        }
        kern_finish(j, acc, r, 1, t0, nt);
    }
}

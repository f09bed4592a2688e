/* pool.c - the compute thread pool (see pool.h).
 *
 * The workers are created once and live until pool_destroy. A pool_run is a generation: the caller
 * writes the job (fn, ctx) and publishes one atomic word holding (generation, task count, next
 * task). Any thread claims a task by a compare-and-swap that advances `next`; a claim can only
 * succeed while that generation is live, and the job cannot change before every claimed task is
 * done, so whatever a thread reads after a successful claim belongs to it. The caller claims tasks
 * too and returns when the count of finished tasks reaches the task count. It never waits for a
 * worker that has not woken up yet (a loaded machine may take a while to schedule one): such a
 * worker finds nothing left to claim and goes back to sleep.
 *
 * A waiting thread spins briefly before it sleeps on a condition variable: decode issues thousands
 * of short pool runs per token, and a futex wake-up costs several microseconds. pool_run allocates
 * nothing. */
#include "util/pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/err.h"
#include "util/platform.h"

/* Polls of a shared word before sleeping: some microseconds on current x86 cores. */
#define POOL_SPIN 2048

/* The published word: generation | task count | next task. */
#define TASK_BITS 21
#define TASK_MASK ((1u << TASK_BITS) - 1)
#define GEN_MASK ((1u << (64 - 2 * TASK_BITS)) - 1)
#define POOL_MAX_BATCH ((int)TASK_MASK) /* larger runs go in several generations */

static inline uint64_t word_pack(uint32_t gen, uint32_t n, uint32_t next) {
    return (uint64_t)gen << (2 * TASK_BITS) | (uint64_t)n << TASK_BITS | next;
}
static inline uint32_t word_gen(uint64_t w) { return (uint32_t)(w >> (2 * TASK_BITS)); }
static inline uint32_t word_n(uint64_t w) { return (uint32_t)(w >> TASK_BITS) & TASK_MASK; }
static inline uint32_t word_next(uint64_t w) { return (uint32_t)w & TASK_MASK; }

struct Pool {
    int n_threads; /* including the caller */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* workers: a new generation (or stop) was published */
    pthread_cond_t finished; /* caller: the last task of the generation is done */
    /* The job; written by the caller only while no task of the previous generation is running. */
    PoolFn fn;
    void *ctx;
    int base;     /* index of the generation's task 0 within the pool_run */
    uint32_t gen; /* the caller's copy */
    atomic_int stop;
    /* Each on its own cache line: both are written by every thread. */
    _Alignas(64) _Atomic uint64_t word;
    _Alignas(64) atomic_uint done;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs tasks while any are left, starting from the word w. Returns the generation it
 * saw last (a worker may be carried into a newer generation by a failed claim). */
static uint32_t work(Pool *p, uint64_t w, int is_caller) {
    for (;;) {
        if (word_next(w) >= word_n(w)) return word_gen(w);
        if (!atomic_compare_exchange_weak_explicit(&p->word, &w, w + 1, memory_order_acquire, memory_order_acquire))
            continue; /* w now holds the current word */
        uint32_t n = word_n(w);
        p->fn(p->ctx, p->base + (int)word_next(w));
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n && !is_caller) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
        w = atomic_load_explicit(&p->word, memory_order_acquire);
    }
}

/* Waits until the published generation differs from `seen` (or stop is set); returns the word. */
static uint64_t await_generation(Pool *p, uint32_t seen) {
    uint64_t w;
    for (int i = 0; i < POOL_SPIN; i++) {
        w = atomic_load_explicit(&p->word, memory_order_acquire);
        if (word_gen(w) != seen) return w;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (word_gen(w = atomic_load_explicit(&p->word, memory_order_acquire)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return w;
}

static void *worker_main(void *arg) {
    Pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        uint64_t w = await_generation(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        seen = work(p, w, 0);
    }
}

static void await_done(Pool *p, uint32_t n) {
    for (int i = 0; i < POOL_SPIN; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->done, memory_order_acquire) != n) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void run_generation(Pool *p, int base, int n, PoolFn fn, void *ctx) {
    p->fn = fn;
    p->ctx = ctx;
    p->base = base;
    p->gen = (p->gen + 1) & GEN_MASK;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint64_t w = word_pack(p->gen, (uint32_t)n, 0);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->word, w, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    work(p, w, 1);
    await_done(p, (uint32_t)n);
}

void pool_run(Pool *p, int n_tasks, PoolFn fn, void *ctx) {
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i);
        return;
    }
    for (int base = 0; base < n_tasks; base += POOL_MAX_BATCH)
        run_generation(p, base, n_tasks - base < POOL_MAX_BATCH ? n_tasks - base : POOL_MAX_BATCH, fn, ctx);
}

Pool *pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = plat_cpu_count();
    if (n_threads > POOL_MAX_THREADS) n_threads = POOL_MAX_THREADS;
    Pool *p = df_calloc(1, sizeof *p);
    p->n_threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    if (n_threads == 1) return p;
    p->workers = df_malloc(sizeof *p->workers * (size_t)(n_threads - 1));
    /* Workers block every signal: handlers (Ctrl-C) run on the threads that own them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n_threads - 1; i++) {
        /* If the system refuses a thread, run with those we have: results do not depend on it. */
        if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) break;
        p->n_threads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

void pool_destroy(Pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    p->gen = (p->gen + 1) & GEN_MASK;
    atomic_store_explicit(&p->word, word_pack(p->gen, 0, 0), memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int pool_threads(const Pool *p) { return p ? p->n_threads : 1; }

/* The thread pool: every task index runs exactly once per pool_run, over many runs and 1..4
 * threads; the caller takes part. (K3_THREADS is parsed in test_settings.c.) */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util/pool.h"

enum { MAX_TASKS = 1000 };

typedef struct {
    atomic_int runs[MAX_TASKS];
    pthread_t caller;
    atomic_int by_caller;
    int spin; /* busy work per task, so runs overlap */
} Count;

static void count_task(void *ctx, int task) {
    Count *c = ctx;
    atomic_fetch_add(&c->runs[task], 1);
    if (pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&c->by_caller, 1);
    for (volatile int i = 0; i < c->spin; i++) {
    }
}

static void mark_task(void *ctx, int task) { atomic_fetch_add(&((atomic_uchar *)ctx)[task], 1); }

/* Runs n tasks and checks each ran once; returns how many the calling thread ran. */
static int run_and_check(Pool *p, Count *c, int n) {
    for (int i = 0; i < MAX_TASKS; i++) atomic_store(&c->runs[i], 0);
    atomic_store(&c->by_caller, 0);
    c->caller = pthread_self();
    pool_run(p, n, count_task, c);
    int wrong = 0;
    for (int i = 0; i < MAX_TASKS; i++) wrong += atomic_load(&c->runs[i]) != (i < n ? 1 : 0);
    CHECK_MSG(wrong == 0, "%d threads, %d tasks: %d indices ran a wrong number of times", pool_threads(p), n, wrong);
    return atomic_load(&c->by_caller);
}

static void every_task_runs_exactly_once_for_1_to_4_threads(void) {
    static Count c;
    const int sizes[] = {0, 1, 2, 3, 4, 5, 7, 64, 999, MAX_TASKS};
    for (int threads = 1; threads <= 4; threads++) {
        Pool *p = pool_create(threads);
        CHECK(pool_threads(p) == threads);
        for (int rep = 0; rep < 300; rep++) {
            c.spin = rep % 3 == 0 ? 200 : 0;
            run_and_check(p, &c, sizes[rep % 10]);
        }
        pool_destroy(p);
    }
}

static void the_caller_takes_part(void) {
    static Count c;
    Pool *p = pool_create(1);
    CHECK(run_and_check(p, &c, 10) == 10); /* a pool of one is the caller alone */
    pool_destroy(p);
    CHECK(run_and_check(NULL, &c, 10) == 10); /* so is no pool */
    p = pool_create(3);
    c.spin = 20000;
    int total = 0;
    for (int rep = 0; rep < 20; rep++) total += run_and_check(p, &c, 60);
    CHECK(total > 0); /* over 20 runs the caller took tasks too instead of only waiting */
    pool_destroy(p);
}

static void many_short_runs_back_to_back(void) {
    static Count c;
    Pool *p = pool_create(4);
    c.spin = 0;
    for (int rep = 0; rep < 20000; rep++) run_and_check(p, &c, 1 + rep % 9);
    pool_destroy(p);
}

/* More tasks than one published word can count: the run is split, every index still runs once. */
static void runs_larger_than_one_batch(void) {
    enum { N = (1 << 21) + 5 };
    static atomic_uchar seen[N];
    Pool *p = pool_create(3);
    pool_run(p, N, mark_task, seen);
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += atomic_load(&seen[i]) != 1;
    CHECK_MSG(wrong == 0, "%d of %d indices ran a wrong number of times", wrong, N);
    pool_destroy(p);
}

/* The cores this process may use, as the pool should count them: its affinity on Linux. */
static int cores(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static void zero_threads_means_all_cores(void) {
    Pool *p = pool_create(0);
    CHECK(pool_threads(p) == cores());
    pool_destroy(p);
    p = pool_create(-3);
    CHECK(pool_threads(p) == cores());
    pool_destroy(p);
    pool_destroy(NULL);
    CHECK(pool_threads(NULL) == 1);
}

int main(void) {
    RUN(every_task_runs_exactly_once_for_1_to_4_threads);
    RUN(the_caller_takes_part);
    RUN(many_short_runs_back_to_back);
    RUN(runs_larger_than_one_batch);
    RUN(zero_threads_means_all_cores);
    return check_summary();
}

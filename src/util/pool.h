/* pool.h - the compute thread pool (one per process, sized by the caller: K3_THREADS or the core
 * count).
 *
 * pool_run splits n_tasks task indices over the workers and the calling thread and returns when
 * all are done. Tasks must write disjoint outputs; the pool never changes the order of arithmetic
 * inside a task, so results do not depend on the number of threads. Not reentrant: a task must
 * not call pool_run. */
#ifndef DF_POOL_H
#define DF_POOL_H

/* The most threads a pool runs (a larger request is capped). */
#define POOL_MAX_THREADS 1024

typedef struct Pool Pool;
typedef void (*PoolFn)(void *ctx, int task);

/* n_threads <= 0 means "all online cores". Total threads including the caller. */
Pool *pool_create(int n_threads);
void pool_destroy(Pool *p);
int pool_threads(const Pool *p);
void pool_run(Pool *p, int n_tasks, PoolFn fn, void *ctx);

#endif

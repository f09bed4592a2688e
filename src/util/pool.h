/* pool.h - the compute thread pool (one per process, sized by K3_THREADS or the core count).
 *
 * pool_run splits n_tasks task indices over the workers and the calling thread and returns when
 * all are done. Tasks must write disjoint outputs; the pool never changes the order of arithmetic
 * inside a task, so results do not depend on the number of threads. Not reentrant: a task must
 * not call pool_run. */
#ifndef DF_POOL_H
#define DF_POOL_H

typedef struct Pool Pool;
typedef void (*PoolFn)(void *ctx, int task);

/* n_threads <= 0 means "all online cores". Total threads including the caller. */
Pool *pool_create(int n_threads);
void pool_destroy(Pool *p);
int pool_threads(const Pool *p);
void pool_run(Pool *p, int n_tasks, PoolFn fn, void *ctx);

/* Threads requested by K3_THREADS (0 if unset = all cores). Exits with a message on a bad value. */
int pool_threads_from_env(void);

#endif

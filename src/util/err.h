/* err.h - the one error convention of the code base.
 *
 * Every fallible function returns 0 on success and -1 on failure, after recording a one-line
 * message with df_fail(). Callers that add context (which file, which tensor) wrap the message
 * with df_failctx(); the top level prints df_errmsg() once. Messages are per thread. */
#ifndef DF_ERR_H
#define DF_ERR_H

#include <stddef.h>

#define DF_PRINTF(a, b) __attribute__((format(printf, a, b)))

#ifdef __cplusplus /* the CUDA backend (C++ by nvcc) reports errors the same way */
#define DF_NORETURN [[noreturn]]
extern "C" {
#else
#define DF_NORETURN _Noreturn
#endif

/* Record a message and return -1 (so `return df_fail(...)` reads naturally). */
int df_fail(const char *fmt, ...) DF_PRINTF(1, 2);
/* Prepend context to the current message: "ctx: previous message". Returns -1. */
int df_failctx(const char *fmt, ...) DF_PRINTF(1, 2);
/* The last message of this thread ("" if none). Valid until the next df_fail on this thread. */
const char *df_errmsg(void);
void df_errclear(void);

/* Print "deltafin: msg" to stderr and exit(1). For the CLI layer only. */
DF_NORETURN void df_die(const char *fmt, ...) DF_PRINTF(1, 2);

/* Allocation that cannot fail: out of memory is fatal (sizes must be validated before). */
__attribute__((returns_nonnull, malloc)) void *df_malloc(size_t n);
void *df_calloc(size_t n, size_t size);
void *df_realloc(void *p, size_t n);
char *df_strdup(const char *s);
/* Aligned allocation (alignment a power of two >= sizeof(void*)); free with free(). */
void *df_aligned_alloc(size_t alignment, size_t n);

#ifdef __cplusplus
}
#endif

#endif

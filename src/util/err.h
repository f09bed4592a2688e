/* err.h - the one error convention of the code base.
 *
 * Every fallible function returns 0 on success and -1 on failure, after recording a one-line
 * message with df_fail(). Callers that add context (which file, which tensor) wrap the message
 * with df_failctx(); the top level prints df_errmsg() once (the CLI's df_die, cli/die.h).
 * Messages are per thread.
 *
 * Library code never ends the process, with one exception, the single abort point: running out
 * of memory in df_malloc and the allocators below prints "deltafin: out of memory allocating N
 * bytes" and exits with status 1. Every size is validated before it is allocated, so this means
 * the machine itself has no memory left, which no caller could handle better.
 *
 * Invariants. What a header promises in prose about the program's own state (the tokens a Session
 * holds and its State agree; a pass's rows add up) is checked by DF_INVARIANT in the sanitizer
 * build (compiled with -DDF_CHECK_INVARIANTS, as `make asan` does): a broken one is a bug, not an
 * input error, so it prints where and what, and aborts, like a sanitizer report. Elsewhere it
 * compiles to nothing (the condition is not evaluated). */
#ifndef DF_ERR_H
#define DF_ERR_H

#include <stddef.h>

#define DF_PRINTF(a, b) __attribute__((format(printf, a, b)))

#ifdef __cplusplus /* the CUDA backend (C++ by nvcc) reports errors the same way */
extern "C" {
#endif

/* Record a message and return -1 (so `return df_fail(...)` reads naturally). */
int df_fail(const char *fmt, ...) DF_PRINTF(1, 2);
/* Prepend context to the current message: "ctx: previous message". Returns -1. */
int df_failctx(const char *fmt, ...) DF_PRINTF(1, 2);
/* Copies src into dst[cap] (NUL-terminated) with every control character written as \r, \n,
 * \t or \xNN: df_fail and df_failctx store messages so, since messages are one line and often
 * quote file contents (a CRLF file's carriage return) or arguments. */
void df_escape_controls(char *dst, size_t cap, const char *src);
/* The last message of this thread ("" if none). Valid until the next df_fail on this thread. */
const char *df_errmsg(void);
void df_errclear(void);

#ifdef DF_CHECK_INVARIANTS
#define DF_INVARIANT(cond, ...) ((cond) ? (void)0 : df_invariant_broken(__FILE__, __LINE__, #cond, __VA_ARGS__))
#else
#define DF_INVARIANT(cond, ...) ((void)sizeof((cond) ? 1 : 0)) /* names cond's variables, evaluates nothing */
#endif
__attribute__((noreturn)) void df_invariant_broken(const char *file, int line, const char *cond, const char *fmt, ...)
    DF_PRINTF(4, 5);

/* Allocation that cannot fail: out of memory is the abort point above (sizes must be validated
 * before). */
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

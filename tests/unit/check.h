/* check.h - the unit tests' assertions. A test file defines test functions, lists them in main()
 * with RUN(fn), and ends with return check_summary(). A failing CHECK prints file:line and the
 * expression and marks the current test failed; the test goes on so one run shows every failure. */
#ifndef DF_CHECK_H
#define DF_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failed_now, check_pass, check_fail;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            check_failed_now = 1;                                                    \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            check_failed_now = 1;                                                    \
        }                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                        \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)",     \
              (double)(a), (double)(b), (double)(tol))

#define RUN(fn)                                                                      \
    do {                                                                             \
        check_failed_now = 0;                                                        \
        fn();                                                                        \
        if (check_failed_now) {                                                      \
            check_fail++;                                                            \
            fprintf(stderr, "FAIL %s\n", #fn);                                       \
        } else {                                                                     \
            check_pass++;                                                            \
            printf("ok   %s\n", #fn);                                                \
        }                                                                            \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_pass, check_fail);
    return check_fail ? 1 : 0;
}

#endif

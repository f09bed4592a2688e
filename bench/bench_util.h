/* bench_util.h - what the C benchmarks share: the clock (util/clock.h) and medians. */
#ifndef DF_BENCH_UTIL_H
#define DF_BENCH_UTIL_H

#include <stdlib.h>

#include "util/clock.h"

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif

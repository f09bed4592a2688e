#include "util/clock.h"

double df_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec df_deadline(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long whole = (long)seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}

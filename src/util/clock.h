/* clock.h - the clocks the code base measures and waits with. */
#ifndef DF_CLOCK_H
#define DF_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock (CLOCK_MONOTONIC: unaffected by changes of the wall-clock time),
 * from an arbitrary origin: only differences mean anything. */
double df_now(void);

/* The wall-clock time `seconds` from now (seconds >= 0), as pthread_cond_timedwait takes its
 * deadline (a condition variable waits on CLOCK_REALTIME unless told otherwise): the one place
 * the threads that wait with a timeout (the server's gate and watchdog, the scheduler's
 * consumers) compute one. */
struct timespec df_deadline(double seconds);

#endif

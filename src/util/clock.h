/* clock.h - the one clock the code base measures time with. */
#ifndef DF_CLOCK_H
#define DF_CLOCK_H

/* Seconds on the monotonic clock (CLOCK_MONOTONIC: unaffected by changes of the wall-clock time),
 * from an arbitrary origin: only differences mean anything. */
double df_now(void);

#endif

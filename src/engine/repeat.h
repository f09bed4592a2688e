/* repeat.h - the repetition stop: notices a generation caught in a loop (a small model decoding
 * greedily soon repeats one phrase to the end of its budget), so that a chat answer ends there
 * instead of at its token limit. The server's chats and `deltafin chat` use it
 * (DELTAFIN_REPEAT_STOP turns it off).
 *
 * A loop: the last tokens are one block of REPEAT_MAX_PERIOD tokens or fewer repeated, at least
 * REPEAT_MIN_COPIES times over and over at least REPEAT_MIN_SPAN tokens in all (so a block of 1
 * to 42 tokens must fill the last 128 tokens, a block of 100 the last 300). Ordinary text never
 * repeats itself token for token like that; a list whose items merely look alike does not
 * either, since the item numbers or words differ.
 *
 * Cost: REPEAT_MAX_PERIOD comparisons per token, no allocation. The guard is a plain value:
 * zero-initialised (or repeat_reset) it has seen nothing. */
#ifndef DF_REPEAT_H
#define DF_REPEAT_H

#include <stdint.h>

#define REPEAT_MAX_PERIOD 128
#define REPEAT_MIN_COPIES 3
#define REPEAT_MIN_SPAN 128

typedef struct {
    int32_t last[REPEAT_MAX_PERIOD]; /* the latest tokens, a ring: token i at i % REPEAT_MAX_PERIOD */
    uint32_t run[REPEAT_MAX_PERIOD + 1]; /* run[p]: how many latest tokens equal the token p before them */
    uint64_t seen;                   /* tokens pushed */
} RepeatGuard;

void repeat_reset(RepeatGuard *g);
/* Adds the next generated token. Returns the period of the loop the tokens are now caught in,
 * or 0. */
int repeat_push(RepeatGuard *g, int32_t token);

#endif

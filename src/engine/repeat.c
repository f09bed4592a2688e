/* repeat.c - loop detection over generated tokens (see repeat.h). */
#include "engine/repeat.h"

#include <string.h>

void repeat_reset(RepeatGuard *g) { memset(g, 0, sizeof *g); }

int repeat_push(RepeatGuard *g, int32_t token) {
    int found = 0;
    for (int p = 1; p <= REPEAT_MAX_PERIOD; p++) {
        if ((uint64_t)p > g->seen) {
            g->run[p] = 0;
            continue;
        }
        int32_t before = g->last[(g->seen - (uint64_t)p) % REPEAT_MAX_PERIOD];
        g->run[p] = before == token ? g->run[p] + 1 : 0;
        /* the latest run[p] + p tokens are copies of one p-token block */
        uint32_t span = g->run[p] + (uint32_t)p, need = (uint32_t)p * REPEAT_MIN_COPIES;
        if (need < REPEAT_MIN_SPAN) need = REPEAT_MIN_SPAN;
        if (!found && span >= need) found = p;
    }
    g->last[g->seen % REPEAT_MAX_PERIOD] = token;
    g->seen++;
    return found;
}

/* The repetition stop (engine/repeat.h): a tail that repeats one block is found as soon as it
 * covers three copies and 128 tokens, for every block length up to 128 and not beyond; text that
 * only looks alike (numbered items, a block that changes) never is; the guard forgets with reset. */
#include <string.h>

#include "check.h"
#include "engine/repeat.h"
#include "util/rng.h"

/* Pushes `lead` distinct tokens, then copies of a block of `period` tokens; returns how many
 * tokens of the copies it took to report a loop (0: never within `copies_max` copies, or 1000
 * tokens when that is more), and the period reported in *found. */
static int tokens_to_stop(int lead, int period, int copies_max, int *found) {
    RepeatGuard g;
    repeat_reset(&g);
    for (int i = 0; i < lead; i++) CHECK(repeat_push(&g, 100000 + i) == 0);
    for (int n = 0; n < period * copies_max || n < 1000; n++) {
        int p = repeat_push(&g, 5000 + n % period);
        if (p) return *found = p, n + 1;
    }
    return *found = 0, 0;
}

static void a_loop_is_found_when_it_covers_its_span(void) {
    static const int periods[] = {1, 2, 7, 42, 43, 64, 100, 128};
    for (size_t i = 0; i < sizeof periods / sizeof *periods; i++) {
        int p = periods[i], found;
        int need = p * REPEAT_MIN_COPIES > REPEAT_MIN_SPAN ? p * REPEAT_MIN_COPIES : REPEAT_MIN_SPAN;
        int n = tokens_to_stop(10, p, 8, &found);
        CHECK_MSG(n == need && found >= 1 && p % found == 0, "period %d: stopped after %d tokens (wanted %d), period %d", p, n,
                  need, found);
    }
    int found;
    CHECK_MSG(tokens_to_stop(0, 129, 6, &found) == 0, "a block of 129 tokens is past the longest period, found %d", found);
}

static void text_that_only_looks_alike_goes_on(void) {
    RepeatGuard g;
    repeat_reset(&g);
    /* "item N: the same words" with N counting up: the numbers break every period */
    for (int item = 0; item < 400; item++) {
        CHECK(repeat_push(&g, 7) == 0);
        CHECK(repeat_push(&g, 1000 + item) == 0);
        for (int w = 0; w < 6; w++) CHECK(repeat_push(&g, 20 + w) == 0);
    }
    Rng rng;
    rng_seed(&rng, 3);
    repeat_reset(&g);
    for (int i = 0; i < 20000; i++) CHECK(repeat_push(&g, (int32_t)(rng_next(&rng) % 50)) == 0);
    /* a loop, then reset: nothing carries over */
    for (int i = 0; i < 200; i++) repeat_push(&g, 9);
    repeat_reset(&g);
    for (int i = 0; i < 127; i++) CHECK(repeat_push(&g, 9) == 0);
    CHECK(repeat_push(&g, 9) == 1);
}

int main(void) {
    RUN(a_loop_is_found_when_it_covers_its_span);
    RUN(text_that_only_looks_alike_goes_on);
    return check_summary();
}

/* The speculation controller (src/engine/spec.c) on its own: which n-gram draft it proposes, and
 * when it drafts, pauses and probes again. Losslessness is tested in test_spec.c. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/spec.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Spec fresh(void) {
    Spec s;
    spec_init(&s, 1);
    return s;
}

/* A loop: every suffix matches a long earlier one. */
static const int loop[] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};

static void test_needs_a_two_token_match(void) {
    Spec s = fresh();
    spec_plain(&s, 0.1);
    int out[SPEC_MAX_DRAFT];
    const int once[] = {1, 2, 3, 4, 1}; /* the last token was seen, but not the two last */
    CHECK(spec_draft(&s, once, COUNT(once), 8, out) == 0);
    const int twice[] = {1, 2, 3, 4, 1, 2};
    const int twice_next[] = {3, 4, 1, 2, 3, 4, 1, 2}; /* the loop goes on around */
    CHECK(spec_draft(&s, twice, COUNT(twice), 8, out) == 8);
    CHECK(memcmp(out, twice_next, sizeof twice_next) == 0);
    /* "7 8" occurs twice before the end: the most recent occurrence is continued */
    const int recent[] = {7, 8, 9, 7, 8, 5, 7, 8};
    const int recent_next[] = {5, 7, 8, 5, 7};
    CHECK(spec_draft(&s, recent, COUNT(recent), 5, out) == 5); /* no more than the room */
    CHECK(memcmp(out, recent_next, sizeof recent_next) == 0);
}

static void test_pauses_after_a_rejected_draft(void) {
    Spec s = fresh();
    int out[SPEC_MAX_DRAFT];
    spec_plain(&s, 0.1);
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 8);
    spec_record(&s, 8, 0, 0.5);
    CHECK(s.pauses == 1);
    int drafted = 0;
    for (int i = 0; i < 16; i++) drafted += spec_draft(&s, loop, COUNT(loop), 8, out);
    CHECK(drafted == 0 && s.paused == 16);
    /* the probe after the pause starts from a neutral acceptance: 5 drafts, not 8 */
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 5);
    spec_record(&s, 5, 0, 0.3);
    CHECK(s.pauses == 2 && s.pause_left == 32); /* a second failure pauses twice as long */
    CHECK(s.verifies == 2 && s.drafted == 13 && s.accepted == 0);
}

/* All drafts accepted but the pass slower than the plain passes it replaced: pause. */
static void test_pauses_when_verify_is_slow(void) {
    Spec s = fresh();
    int out[SPEC_MAX_DRAFT];
    spec_plain(&s, 0.1);
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 8);
    spec_record(&s, 8, 8, 0.5); /* 9 tokens in 0.5 s against 0.1 s each: keep drafting */
    CHECK(s.pauses == 0 && spec_draft(&s, loop, COUNT(loop), 8, out) == 8);
    spec_record(&s, 8, 8, 3.0); /* 9 tokens in 3 s: slower than 9 plain passes */
    CHECK(s.pauses == 1 && spec_draft(&s, loop, COUNT(loop), 8, out) == 0);
}

static void test_off(void) {
    Spec s;
    spec_init(&s, 0);
    CHECK(!s.on);
    spec_plain(&s, 0.1);
    int out[SPEC_MAX_DRAFT];
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 0);
}

/* Every step drafts, so no plain pass is ever timed: after four verify passes one step decodes
 * plainly (once) so that the speed check has a plain time to compare with. */
static void test_times_one_plain_pass_when_always_drafting(void) {
    Spec s = fresh();
    int out[SPEC_MAX_DRAFT];
    for (int i = 0; i < 4; i++) {
        CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 8);
        spec_record(&s, 8, 8, 0.2);
    }
    CHECK(s.plain_s == 0 && s.pauses == 0);
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 0); /* the calibration step */
    spec_plain(&s, 0.1);
    CHECK(spec_draft(&s, loop, COUNT(loop), 8, out) == 8);
    spec_record(&s, 8, 8, 0.2);  /* 9 tokens in 0.2 s against 0.1 s each: pays */
    CHECK(s.pauses == 0 && s.gain > 1);
    for (int i = 0; i < 6 && s.pauses == 0; i++) spec_record(&s, 8, 2, 0.6); /* 3 tokens in 0.6 s: loses */
    CHECK(s.pauses == 1 && s.calibrated == 1);
}

int main(void) {
    RUN(test_needs_a_two_token_match);
    RUN(test_pauses_after_a_rejected_draft);
    RUN(test_pauses_when_verify_is_slow);
    RUN(test_times_one_plain_pass_when_always_drafting);
    RUN(test_off);
    return check_summary();
}

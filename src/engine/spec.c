#include "engine/spec.h"

#include <string.h>

#define MATCH_MAX 16          /* longer suffix matches predict no better; bounds the scan */
/* A draft needs a suffix match of at least two tokens: a token merely seen before predicts what
 * follows it poorly (on the ordinary bench model all such drafts were rejected), and a rejected
 * draft of d tokens costs a verify pass of d + 1 rows, measured at 1.55 (2 rows) to 5.5 (9 rows)
 * plain passes on a streamed model (docs/PERFORMANCE.md). Repeating text matches long suffixes. */
#define MATCH_MIN 2
#define ACCEPT_FLOOR 0.25     /* rolling acceptance below which drafting is paused */
#define PAUSE_FIRST 16        /* plain tokens in the first pause; doubles up to PAUSE_MAX */
#define PAUSE_MAX 1024
/* Verify passes after which, if no plain pass has been timed yet (every step found a draft), one
 * step decodes plainly: without that time the speed check cannot run, and acceptance alone is
 * a poor guide (a pass of d + 1 rows costs far more than one plain pass). */
#define CALIBRATE_AFTER 4

void spec_init(Spec *s, int on) {
    memset(s, 0, sizeof *s);
    s->on = on;
    s->accept = 1;
    s->gain = 1;
    s->pause_len = PAUSE_FIRST;
}

/* End of the most recent earlier occurrence of the longest suffix of hist; -1 if none is at
 * least MATCH_MIN long. */
static int longest_match(const int *hist, int n) {
    int best = -1, best_len = 0;
    for (int e = n - 2; e >= 0 && best_len < MATCH_MAX; e--) {
        int len = 0;
        while (len < MATCH_MAX && len <= e && hist[e - len] == hist[n - 1 - len]) len++;
        if (len > best_len) best = e, best_len = len;
    }
    return best_len >= MATCH_MIN ? best : -1;
}

int spec_draft(Spec *s, const int *hist, int n, int limit, int *out) {
    if (!s->on || n < 2) return 0;
    if (s->pause_left > 0) {
        s->pause_left--, s->paused++;
        return 0;
    }
    if (s->plain_s == 0 && s->verifies >= CALIBRATE_AFTER && !s->calibrated) {
        s->calibrated = 1;
        return 0;
    }
    /* a long draft costs rows of compute whether accepted or not: scale it with acceptance */
    int cap = 1 + (int)(s->accept * (SPEC_MAX_DRAFT - 1) + 0.5);
    if (limit > cap) limit = cap;
    if (limit <= 0) return 0;
    if (s->source) {
        int d = s->source(s->source_ctx, hist, n, limit, out);
        return d < limit ? d : limit;
    }
    int e = longest_match(hist, n), d = 0;
    if (e < 0) return 0;
    /* the text since the match repeats what followed it; a loop shorter than the draft goes on
     * around (else a loop of p tokens would be drafted only p at a time) */
    int period = n - 1 - e;
    for (; d < limit; d++) out[d] = d < period ? hist[e + 1 + d] : out[d - period];
    return d;
}

void spec_plain(Spec *s, double seconds) { s->plain_s = s->plain_s > 0 ? 0.75 * s->plain_s + 0.25 * seconds : seconds; }

void spec_record(Spec *s, int drafted, int accepted, double seconds) {
    s->verifies++;
    s->drafted += (uint64_t)drafted;
    s->accepted += (uint64_t)accepted;
    s->accept = 0.75 * s->accept + 0.25 * ((double)accepted / drafted);
    if (s->plain_s > 0 && seconds > 0) s->gain = 0.75 * s->gain + 0.25 * ((1 + accepted) * s->plain_s / seconds);
    if (s->accept >= ACCEPT_FLOOR && s->gain >= 1) {
        if (s->accept >= 2 * ACCEPT_FLOOR) s->pause_len = PAUSE_FIRST;
        return;
    }
    /* not paying: decode plainly for a while, then probe again from neutral estimates */
    s->pause_left = s->pause_len;
    s->pauses++;
    if (s->pause_len < PAUSE_MAX) s->pause_len *= 2;
    s->accept = 2 * ACCEPT_FLOOR;
    s->gain = 1;
}

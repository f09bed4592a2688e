/* spec.h - lossless n-gram speculation for greedy decoding (K3_SPEC): where the drafts come from
 * and when to stop making them.
 *
 * A draft is what followed the most recent earlier occurrence of the longest suffix (two tokens
 * or more) of the text so far (prompt + generated), repeated as a loop when that is shorter than
 * the draft. The model verifies it in one pass
 * (model_forward_verify); greedy output is unchanged whatever the drafts are, so this module only
 * decides speed. It switches drafting off for a while when verification is not paying, measured
 * two ways: the rolling fraction of drafted tokens accepted, and the rolling ratio of tokens per
 * second in verify passes to that of plain one-token passes, once one has been timed (a verify
 * pass of many rows can cost several plain ones when each row reads different experts); when
 * every step finds a draft, one step after the first few verify passes decodes plainly to time
 * one. It probes again later; the pause doubles each time a probe fails. */
#ifndef DF_SPEC_H
#define DF_SPEC_H

#include <stdint.h>

#define SPEC_MAX_DRAFT 8     /* drafted tokens per pass: a verify pass is at most 9 rows */

/* A source of drafts: up to limit tokens to follow hist[0..n) into out; returns how many. */
typedef int (*DraftFn)(void *ctx, const int *hist, int n, int limit, int *out);

typedef struct {
    int on;                  /* K3_SPEC: 0 never drafts */
    DraftFn source;          /* NULL: n-gram suffix matches (the default) */
    void *source_ctx;
    double accept;           /* rolling fraction of drafted tokens accepted */
    double plain_s;          /* rolling seconds per plain pass, 0 until one was timed */
    int calibrated;          /* a plain pass was forced to time one (at most once) */
    double gain;             /* rolling verify-pass speed relative to plain passes */
    int pause_left, pause_len;
    uint64_t passes;         /* decode forwards, with or without a draft */
    uint64_t verifies, drafted, accepted, paused;
    uint64_t pauses;         /* times drafting was paused (paused: the tokens decoded meanwhile) */
} Spec;

/* A controller that drafts when on (K3_SPEC), from its initial estimates. */
void spec_init(Spec *s, int on);
/* Up to min(limit, SPEC_MAX_DRAFT) tokens (fewer while acceptance is middling) to try after hist[0..n) into out; 0 = decode one
 * token plainly this step (off, paused, nothing matches, or no room). */
int spec_draft(Spec *s, const int *hist, int n, int limit, int *out);
/* What the model accepted of the last draft (0..drafted), and the pass's seconds. */
void spec_record(Spec *s, int drafted, int accepted, double seconds);
/* A plain (one token, no draft) pass took this long. */
void spec_plain(Spec *s, double seconds);

#endif

/* match_step.h - advancing partial matches of a Grammar by one unit (internal to matcher.c).
 *
 * A partial match ("thread") is a chain of frames, innermost first, each naming the node it
 * matches and how far it got; frames live in an Arena and point to the frame below by index,
 * so threads that share their outer frames share them in memory. Frames are never modified:
 * a step writes new frames and leaves the old ones for other threads and for backtracking
 * (the trie walk resets the arena to where it was before each sibling).
 *
 * A parent's frame is recorded in the state it will be in once the child it pushed is done, so
 * a child that finishes is simply dropped ("popped"); frames that can neither continue nor take
 * more are popped at once, frames that may end or continue (a number, text before a marker) end
 * lazily, when the next unit does not fit them. A thread whose outermost frame ended is
 * FR_DONE: the grammar is complete. Below a cache walk's first frame is FR_DETACHED: popping into
 * it means the rest of the token depends on frames the walk does not know. */
#ifndef DF_MATCH_STEP_H
#define DF_MATCH_STEP_H

#include <stdint.h>

#include "text/grammar.h"

#define FR_DONE 0xffffffffu
#define FR_DETACHED 0xfffffffeu
#define FR_REAL(t) ((t) < FR_DETACHED)
#define MATCH_MAX_THREADS (2 * GRAMMAR_MAX_THREADS)

/* JSON number bounds: integers stay exact in an IEEE double and parse as int64 everywhere;
 * with a two-digit exponent no number overflows a double. */
#define NUM_MAX_INT_DIGITS 15
#define NUM_MAX_FRAC_DIGITS 15
#define NUM_MAX_EXP_DIGITS 2

typedef struct {
    uint32_t parent; /* frame below, FR_DONE at the outermost frame, or FR_DETACHED */
    uint32_t node;
    uint32_t ord;    /* index of the enclosing numbered item (needs_ord nodes), else 0 */
    uint32_t a, b, c; /* per kind: see match_step.c */
    uint16_t depth;   /* 0 for the outermost frame */
    uint8_t phase, sub;
} Frame;

typedef struct {
    const Grammar *g;
    Frame *fr;
    uint32_t n, cap;
    uint8_t unbounded_strings; /* string frames ignore maxLength (a cache walk that counts characters) */
} Arena;

typedef struct {
    uint32_t t[MATCH_MAX_THREADS]; /* top frame of each thread, or FR_DONE */
    int n;
    uint8_t detached_pop; /* some match continued into the frames below FR_DETACHED */
    uint8_t overflow;     /* more than MATCH_MAX_THREADS threads (the grammar analysis prevents it) */
} Threads;

uint32_t arena_push(Arena *a, const Frame *f);
/* The outermost frame of a match of g->root that has consumed nothing. */
uint32_t match_start(Arena *a);

/* Advances thread t by unit u; the resulting threads are added to out (without duplicates). */
void match_step(Arena *a, uint32_t t, GUnit u, Threads *out);
/* Adds thread t to ts unless an identical one is there. */
void threads_add(const Arena *a, Threads *ts, uint32_t t);

/* Fewest tokens that finish the frame itself (its children already counted as done): literals
 * at their cheapest spelling (span_cost), anything else a token per unit. */
uint32_t frame_rem(const Grammar *g, const Frame *f);
/* Fewest tokens that finish thread t: the sum over its frames down to FR_DONE or FR_DETACHED. */
uint32_t match_remaining(const Arena *a, uint32_t t);

/* A frame's identity for caching what tokens do to it: the fields that decide what the frame
 * accepts from here on, with counts (a string's characters, a repeat's items) replaced by how
 * far below min (and, for repeats, max) they are, clipped to what one token of at most
 * max_units units can change. A string's maxLength is left out: its cache walk ignores it and
 * records each token's characters instead (frame_is_string). Compared with memcmp: no padding. */
typedef struct {
    uint32_t node, ord, a, b, c, d;
    uint16_t depth;
    uint8_t phase, sub;
} FrameKey;

void frame_cache_key(const Grammar *g, const Frame *f, uint32_t max_units, FrameKey *key);

/* 1 for JSON and raw string frames: cache walks count their characters per token. */
int frame_is_string(const Grammar *g, const Frame *f);
/* Characters a string frame may still take (UINT32_MAX: no maxLength). */
uint32_t frame_string_room(const Grammar *g, const Frame *f);

#endif

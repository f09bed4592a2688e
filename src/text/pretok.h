/* pretok.h - K3's pre-tokenisation regex (tiktoken pat_str, docs/MODEL.md 6.2 step 3) on PCRE2.
 *
 * K3 writes the pattern for Rust's regex crate; PCRE2 10.42 reads three of its constructs
 * differently, so the compiled pattern is an exact rewrite (see pretok.c): class intersections
 * `[X&&[^\p{Han}]]` become negated classes, `\p{Han}` becomes `\p{sc:Han}` (Rust's bare script
 * name means Script, PCRE2's means Script_Extensions), and `\s`/`\S` become explicit classes of
 * Unicode White_Space (PCRE2's \s also matches U+180E). All eight alternatives are compiled,
 * with `\s+(?!\S)` kept as a lookahead: every alternative consumes at least one character and
 * together they cover every character, so the pieces tile the text and each match is anchored
 * where the previous one ended. That keeps backtracking local to one piece (linear time).
 *
 * Unicode version: PCRE2 10.42 has Unicode 14.0 tables. Code points assigned later (Nag Mundari,
 * Kawi, ...) count as unassigned here, so text using them can split into different pieces than
 * in K3's own tokenizer, whose regex crate knows them.
 *
 * The compiled pattern is immutable and shared; each thread iterates with its own PretokIter. */
#ifndef DF_PRETOK_H
#define DF_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* K3's pattern as published (for documentation and error messages; not compiled as is). */
extern const char PRETOK_K3_PATTERN[];

typedef struct Pretok Pretok;

/* Compiles the pattern (JIT when available). NULL with a message on failure. */
Pretok *pretok_new(void);
void pretok_free(Pretok *p);

typedef struct {
    const Pretok *p;
    const uint8_t *s; /* the subject: one chunk, valid UTF-8 */
    size_t n, pos;
    void *md;         /* PCRE2 match data, owned */
} PretokIter;

/* Prepares an iterator (allocates its match data); release with pretok_iter_end. Returns 0, or
 * -1 with a message when PCRE2 cannot allocate (nothing to release then). */
int pretok_iter_init(PretokIter *it, const Pretok *p);
/* Starts iterating the pieces of s[0..n), which the iterator reads until the next call. */
void pretok_iter_set(PretokIter *it, const uint8_t *s, size_t n);
/* Next piece: returns 1 with its range, 0 at the end, -1 with a message if PCRE2 fails. */
int pretok_next(PretokIter *it, size_t *start, size_t *len);
void pretok_iter_end(PretokIter *it);

#endif

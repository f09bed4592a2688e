/* regex.h - ECMAScript regular expressions (JSON Schema's "pattern", as validators run it: the
 * `u` flag, a match anywhere in the string unless anchored) as NFAs over code points, within the
 * subset whose language an automaton holds exactly.
 *
 * Supported: literals, `.`, classes ([a-z], [^...], \d \w \s and their negations, inside classes
 * too), escapes (\t \n \v \f \r \0 \xHH \uHHHH with surrogate pairs, \u{...}, \cX, escaped syntax
 * characters), groups ((...), (?:...), (?<name>...)), alternation, the quantifiers * + ? {n}
 * {n,} {n,m} (lazy ones too: the same language; counts up to REGEX_MAX_REPEAT), and the anchors
 * ^ and $ at the start and end of the pattern or of one of its top-level alternatives.
 * Refused, with a message naming the construct and where it is: backreferences, lookahead and
 * lookbehind, word boundaries (\b \B), Unicode property classes (\p{...}), anchors elsewhere, and
 * what ECMAScript's `u` flag itself refuses (a lone { } ], an unknown escape).
 *
 * Code points outside the automata's alphabet (NUL, lone surrogates) never match: a writer that
 * writes neither loses nothing a validator would accept but those. */
#ifndef DF_REGEX_H
#define DF_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "text/automaton.h"

#define REGEX_MAX_REPEAT 1000
#define REGEX_MAX_NESTING 64

/* Adds the pattern's language to n (the pattern text is UTF-8 of len bytes): *start is its start
 * state; its accepting states are marked in n. Returns 0, or -1 with a message (no field name). */
int regex_nfa(const char *pattern, size_t len, Nfa *n, uint32_t *start);

#endif

/* numrange.h - the JSON numbers a numeric schema allows (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, multipleOf), as a byte DFA (automaton.h) whose words are exactly the numbers
 * written in range.
 *
 * What is written: -?(0|[1-9][0-9]*)(.[0-9]+)? without an exponent, at most 15 integer digits
 * (integers: exact in a double and an int64), at most 15 fraction digits, and, when a bound is
 * given, at most 15 significant digits; never -0. Comparisons are exact, in decimal, against the
 * bound's shortest round-trip decimal: a number of at most 15 significant digits compares with
 * the double a validator parses it to exactly as it does in decimal (distinct such decimals are
 * distinct doubles, and rounding keeps their order), so every number written validates in
 * JavaScript, Python and jansson alike.
 *
 * multipleOf: integral values only (of integers, or numbers written as integers): a multiple of
 * 0.01 such as 0.07 fails the floating-point division validators use (0.07 / 0.01 =
 * 7.000000000000001), so no fractional multipleOf can be promised. */
#ifndef DF_NUMRANGE_H
#define DF_NUMRANGE_H

#include <stdint.h>

#include "text/automaton.h"

#define NUM_SIG_DIGITS 15
#define NUM_DECIMAL_MAX 400   /* digits of a bound's integer or fraction part */
#define NUM_MAX_MULTIPLE 100000

typedef struct {
    int neg;                       /* < 0 (zero is never negative) */
    char ip[NUM_DECIMAL_MAX + 1];  /* integer digits without leading zeros ("" for |v| < 1) */
    char fp[NUM_DECIMAL_MAX + 1];  /* fraction digits without trailing zeros */
} Decimal;

typedef struct {
    int integer;                   /* integers only */
    int has_lo, lo_excl, has_hi, hi_excl;
    Decimal lo, hi;
    uint32_t multiple;             /* 0: any; else the integer part is a multiple of it (integers) */
} NumSpec;

/* The shortest decimal that reads back as v (finite); and an integer's digits. */
void decimal_of_double(double v, Decimal *d);
void decimal_of_int(int64_t v, Decimal *d);

/* The byte DFA of the numbers s allows, pruned. Returns 0, or -1 with a message (an empty range,
 * a range no number of at most 15 digits reaches, or too large an automaton). */
int number_dfa(const NumSpec *s, uint32_t max_states, Dfa *out);

#endif

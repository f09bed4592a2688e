/* automaton.h - finite automata over code points or bytes: the regular languages of output
 * constraints that literals and repeats cannot say (a string's pattern or format, a number's
 * range). regex.c builds NFAs from patterns; numrange.c builds number DFAs directly; this module
 * makes NFAs deterministic, intersects DFAs, spells a code-point DFA as the bytes of a JSON
 * string (or of raw text), and prunes what cannot finish. grammar.h's GK_DFA node runs the result.
 *
 * Symbols are uint32 values in ranges [lo, hi]: code points (AUTO_ALPHA: 1..0x10FFFF without the
 * surrogates: NUL is never written) or bytes (0..255). A DFA's state 0 is its start; the edges of
 * state s are e[first[s] .. first[s+1]), sorted by lo and disjoint. Every builder caps its states
 * (max_states) and fails with a message when a language needs more; nothing here is quadratic in
 * an input that is not capped first.
 *
 * Ownership: an Nfa and a Dfa own their arrays (nfa_free, dfa_free); results are written to an
 * out-parameter the caller frees, also after a failure. */
#ifndef DF_AUTOMATON_H
#define DF_AUTOMATON_H

#include <stddef.h>
#include <stdint.h>

#define AUTO_MAX_CODE 0x10FFFFu
#define AUTO_MAX_STATES 65536u  /* states of any one DFA (and of the NFAs' determinisation) */
#define AUTO_MAX_NFA 400000u    /* NFA states and edges */

typedef struct {
    uint32_t lo, hi, to;
} AEdge;

typedef struct {
    uint32_t from, to, lo, hi; /* lo > hi: an epsilon edge */
} NEdge;

typedef struct {
    uint32_t n_states, cap_states;
    uint8_t *accept;
    NEdge *e;
    uint32_t n_e, cap_e;
    int too_big;               /* past AUTO_MAX_NFA: states and edges after it are not recorded */
} Nfa;

typedef struct Dfa {
    uint32_t n_states;
    uint32_t *first;           /* [n_states + 1] */
    AEdge *e;
    uint8_t *accept;           /* [n_states] */
} Dfa;

/* --- NFAs --- */
uint32_t nfa_state(Nfa *n);
void nfa_edge(Nfa *n, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi);
void nfa_eps(Nfa *n, uint32_t from, uint32_t to);
/* Edges from -> to on every code point of AUTO_ALPHA (1..0xD7FF, 0xE000..0x10FFFF). */
void nfa_any(Nfa *n, uint32_t from, uint32_t to);
void nfa_free(Nfa *n);

/* --- DFAs --- */
/* The subset construction from NFA state start. Returns 0, or -1 with a message naming `what`
 * when it needs more than max_states states (or the NFA was too big). */
int dfa_from_nfa(const Nfa *n, uint32_t start, uint32_t max_states, const char *what, Dfa *out);
/* The product: words both accept. Returns 0, or -1 as above. */
int dfa_intersect(const Dfa *a, const Dfa *b, uint32_t max_states, const char *what, Dfa *out);
/* Code-point sequences of min..max symbols (max UINT32_MAX: no maximum). Returns 0, or -1 when
 * that needs more than max_states states. */
int dfa_length(uint32_t min, uint32_t max, uint32_t max_states, const char *what, Dfa *out);
/* Drops the states from which no accepting state is reachable (and the edges into them).
 * Returns 1 when the language is empty (d is then one state without edges), else 0. */
int dfa_prune(Dfa *d);
/* A code-point DFA as bytes: json 1 spells each word as a JSON string, quotes included (UTF-8,
 * " \\ and the controls \b \f \n \r \t as their two-character escapes, every other character
 * verbatim; the controls that would need \u00XX are never written); json 0 as raw UTF-8 text.
 * Returns 0, or -1 when that needs more than max_states. */
int dfa_spell_utf8(const Dfa *cp, int json, uint32_t max_states, const char *what, Dfa *out);
/* Fewest edges from each state to an accepting state (UINT32_MAX: none); dist has n_states. */
void dfa_distances(const Dfa *d, uint32_t *dist);
void dfa_free(Dfa *d);

/* --- building a DFA directly, states in the order they are numbered --- */
typedef struct {
    Dfa d;
    uint32_t cap_states, n_e, cap_e;
    uint32_t open_first;       /* the first edge of the state begun last */
} DfaBuilder;

uint32_t db_state(DfaBuilder *b, int accept);
/* Starts the edges of state s; states are started in order 0, 1, 2, ... */
void db_begin(DfaBuilder *b, uint32_t s);
/* An edge of the open state; ranges come in increasing order (adjacent ones with the same
 * target are merged). */
void db_edge(DfaBuilder *b, uint32_t lo, uint32_t hi, uint32_t to);
/* Ends the last state; the builder's Dfa is then complete (moved out with *out = b->d). */
void db_finish(DfaBuilder *b);

/* --- a map from byte strings to dense ids (set of states, pairs, tuples) --- */
typedef struct {
    uint32_t *slot;            /* id + 1, or 0: empty */
    uint32_t cap;              /* slots, a power of two */
    uint8_t *pool;
    size_t n_pool, cap_pool;
    size_t *off;               /* key of id i: pool[off[i] .. off[i + 1]) */
    uint32_t n, cap_keys;
} IdMap;

/* The id of key (a new one, n - 1, when it was not there: *added set). */
uint32_t idmap_get(IdMap *m, const void *key, size_t len, int *added);
const void *idmap_key(const IdMap *m, uint32_t id, size_t *len);
void idmap_free(IdMap *m);

#endif

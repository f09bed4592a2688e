/* grammar.h - the compiled form of an output constraint, shared by its builders (jsonschema.c:
 * JSON values; reply_grammar.c: K3's reply structure and tool calls) and its runner (matcher.c).
 *
 * A Grammar is a graph of nodes over "units": the 256 byte values and K3's four chat markers
 * (<|open|> <|close|> <|sep|> <|end_of_msg|>, each one special token). A mergeable token is the
 * units of its bytes; a marker token is one unit; no other special token is ever a unit.
 *
 * Node kinds (a "frame" is the matcher's record of one node being matched; CHOICE has none):
 *   SEQ      kids in order; a nullable kid may be skipped
 *   CHOICE   any one of its alternatives (JSON Schema anyOf, type unions)
 *   REPEAT   open, item (sep item)*, close: min..max items (JSON arrays, objects with any
 *            keys, the tool calls); the items of a `numbered` REPEAT carry their 1-based index
 *   LIT      one literal of a sorted set (enum, const, true/false/null, chat-format text)
 *   SWITCH   one literal of a prefix-free sorted set, then the continuation of that literal
 *            (which function a call names decides its arguments; which type an argument
 *            declares decides its value)
 *   FREE     any run of byte units (text up to the next marker: thinking, a free answer)
 *   JSTRING  a JSON string literal, quotes included, min..max characters
 *   RAWSTR   text of min..max characters, well-formed UTF-8 without NUL, ended by a marker
 *            (a string tool argument, written verbatim)
 *   NUMBER   a JSON number (or integer), digits bounded (see matcher.h)
 *   MEMBERS  open, members in declared order, each `key value`, optional ones skippable,
 *            sep between members, close (JSON objects; a call's arguments)
 *   COUNTER  the decimal index of the enclosing numbered REPEAT item (a call's index="N");
 *            only as a SEQ kid
 *   DFA      a word of a deterministic automaton over bytes (automaton.h): a string with a
 *            pattern or a format, a number in a range; its states are dstates[first..+n), the
 *            start first, each with its edges and its distance to the end
 *
 * A Grammar is built once per request, analysed by grammar_finish (for the vocabulary its
 * matchers will use: lengths are counted in its tokens), then immutable: any number of Matchers
 * on any threads may share it. Sizes are capped (GRAMMAR_MAX_*): a builder that
 * goes past a cap sets `too_big`, returns harmless ids, and its caller refuses the request. */
#ifndef DF_GRAMMAR_H
#define DF_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t GUnit;
enum { GM_OPEN, GM_CLOSE, GM_SEP, GM_EOM, GM_N };
#define GU_MARKER(m) ((GUnit)(256 + (m)))
#define GU_COUNT (256 + GM_N)
#define GU_IS_MARKER(u) ((u) >= 256)

#define GRAMMAR_MAX_FRAMES 64         /* nesting of frames a match may hold */
#define GRAMMAR_MAX_NODES 20000
#define GRAMMAR_MAX_UNITS (1u << 20)  /* literal text, all literals together */
#define GRAMMAR_MAX_LITS 20000        /* literals and members, all nodes together */
#define GRAMMAR_MAX_DSTATES (1u << 18) /* automaton states, all DFA nodes together */
#define GRAMMAR_MAX_DEDGES (1u << 20)  /* and their edges */
#define GRAMMAR_MAX_THREADS 32        /* partial parses open at once (anyOf ambiguity) */
#define GRAMMAR_INF 0x3fffffffu       /* "no finite match" in length tables */
#define GRAMMAR_NONE 0xffffffffu      /* no node */

typedef enum {
    GK_SEQ, GK_CHOICE, GK_REPEAT, GK_LIT, GK_SWITCH, GK_FREE, GK_JSTRING, GK_RAWSTR, GK_NUMBER, GK_MEMBERS, GK_COUNTER,
    GK_DFA
} GKind;

typedef struct {
    uint32_t off, len; /* g->units[off .. off+len) */
} GSpan;

typedef struct {
    GSpan key;      /* literal that starts the member, e.g. `"name":` */
    uint32_t value; /* node */
    uint8_t required;
} GMember;

typedef struct {
    uint8_t kind;
    uint8_t integer;          /* NUMBER: integers only */
    uint8_t numbered;         /* REPEAT: items know their index (COUNTER) */
    uint32_t min, max;        /* REPEAT: items; JSTRING, RAWSTR: characters; max UINT32_MAX = none */
    uint32_t first, n;        /* SEQ, CHOICE: kids[first..+n); LIT, SWITCH: lits[first..+n) sorted;
                                 MEMBERS: members[first..+n); DFA: dstates[first..+n) */
    uint32_t item;            /* REPEAT: the item node; SWITCH: its continuations are kids[item..+n) */
    GSpan open, sep, close;   /* REPEAT, MEMBERS */
} GNode;

/* A DFA node's state: its edges dedges[edges..+n_edges) (sorted, disjoint byte ranges), the
 * fewest bytes from it to the end of a word, and whether a word may end here. */
typedef struct {
    uint32_t edges, n_edges, dist;
    uint8_t accept;
} GDState;

typedef struct {
    uint8_t lo, hi;
    uint32_t to;              /* an index into dstates */
} GDEdge;

struct VocabTrie;
struct Dfa;

typedef struct Grammar {
    GNode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *kids;
    uint32_t n_kids, cap_kids;
    GSpan *lits;
    uint32_t n_lits, cap_lits;
    GMember *members;
    uint32_t n_members, cap_members;
    GUnit *units;
    uint32_t n_units, cap_units;
    GDState *dstates;
    uint32_t n_dstates, cap_dstates;
    GDEdge *dedges;
    uint32_t n_dedges, cap_dedges;
    int too_big;
    uint32_t root; /* a SEQ */
    /* analysis (grammar_finish) */
    uint8_t *nullable;  /* [n_nodes] */
    uint8_t *needs_ord; /* [n_nodes]: a COUNTER is reachable without crossing a numbered REPEAT */
    const struct VocabTrie *vocab; /* the vocabulary costs were counted in (NULL: a token per unit) */
    uint32_t *ucost;    /* [n_units]: fewest tokens that spell the rest of a literal from each unit */
    uint32_t *minlen;   /* [n_rows][n_nodes]: fewest tokens of a match that may use r frames */
    uint32_t n_rows;    /* rows 0..n_rows-1; rooms beyond the last row use the last row */
} Grammar;

/* --- building --- */
Grammar *grammar_new(void);
void grammar_free(Grammar *g);

GSpan gb_units(Grammar *g, const GUnit *u, size_t n);
GSpan gb_text(Grammar *g, const char *s, size_t n); /* bytes as units */
/* Concatenates any number of spans into one new span (n spans in s). */
GSpan gb_join(Grammar *g, const GSpan *s, size_t n);

uint32_t gb_seq(Grammar *g, const uint32_t *kids, size_t n);
uint32_t gb_choice(Grammar *g, const uint32_t *alts, size_t n);
/* A literal set; duplicates are dropped. */
uint32_t gb_lit(Grammar *g, const GSpan *lits, size_t n);
uint32_t gb_lit1(Grammar *g, GSpan lit);
/* lits must be non-empty and prefix-free; conts[i] continues lits[i]. Sets too_big (and
 * returns a harmless id) otherwise. */
uint32_t gb_switch(Grammar *g, const GSpan *lits, const uint32_t *conts, size_t n);
uint32_t gb_repeat(Grammar *g, uint32_t item, uint32_t min, uint32_t max, GSpan open, GSpan sep, GSpan close, int numbered);
uint32_t gb_members(Grammar *g, const GMember *m, size_t n, GSpan open, GSpan sep, GSpan close);
uint32_t gb_leaf(Grammar *g, GKind kind, uint32_t min, uint32_t max, int integer);
/* A DFA node for the words of d: a byte automaton (edges within 0..255), pruned (dfa_prune), not
 * empty. The states are copied. */
uint32_t gb_dfa(Grammar *g, const struct Dfa *d);
/* A node to refer to before it is built (recursive schemas): gb_forward makes it, gb_resolve
 * makes it stand for target. */
uint32_t gb_forward(Grammar *g);
void gb_resolve(Grammar *g, uint32_t fwd, uint32_t target);

/* Analyses the grammar rooted at root (a SEQ) for matching with vocab (NULL: counts one token
 * per unit; matchers may then use any vocabulary). Lengths are counted in tokens: a literal costs
 * the fewest tokens of vocab that spell it, anything else one token per unit (an upper bound:
 * every byte is a token). Returns 0, or -1 with a message prefixed by `what`: the grammar is too
 * big, an alternative refers to itself without nesting, nothing finite matches within
 * GRAMMAR_MAX_FRAMES, or anyOf alternatives overlap so much that more than GRAMMAR_MAX_THREADS
 * partial parses could be open at once. */
int grammar_finish(Grammar *g, uint32_t root, const char *what, const struct VocabTrie *vocab);

/* --- queries (after grammar_finish) --- */
static inline const GUnit *gu(const Grammar *g, GSpan s) { return g->units + s.off; }
/* Fewest tokens that spell literal s from unit `from` on. */
static inline uint32_t span_cost(const Grammar *g, GSpan s, uint32_t from) {
    return from >= s.len ? 0 : g->ucost ? g->ucost[s.off + from] : s.len - from;
}
/* Fewest tokens a match of node takes when it may use `room` frames (itself included). */
static inline uint32_t grammar_minlen(const Grammar *g, uint32_t node, uint32_t room) {
    uint32_t r = room < g->n_rows ? room : g->n_rows - 1;
    return g->minlen[(size_t)r * g->n_nodes + node];
}
/* Lexicographic order of unit strings (a proper prefix sorts first). */
int gu_cmp(const GUnit *a, uint32_t na, const GUnit *b, uint32_t nb);
/* Number of decimal digits of n (n >= 1). */
uint32_t grammar_digits(uint32_t n);

#endif

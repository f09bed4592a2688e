/* strfa.c - string automata from pattern, format and length (see strfa.h). */
#include "text/strfa.h"

#include <stdlib.h>
#include <string.h>

#include "text/automaton.h"
#include "text/regex.h"
#include "util/err.h"

#define DATE                                                                                                      \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|" \
    "1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define LABEL "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"

static const struct {
    const char *name, *regex;
} formats[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "T" TIME "$"},
    {"email", "^[a-z0-9_+-]+(?:\\.[a-z0-9_+-]+)*@(?:" LABEL "\\.)+[a-z]{2,24}$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"ipv4", "^(?:" OCTET "\\.){3}" OCTET "$"},
};

const char *strfa_format_regex(const char *format) {
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(formats[i].name, format)) return formats[i].regex;
    return NULL;
}

/* The code-point DFA of a regular expression; messages start with what. */
static int regex_dfa(const char *re, size_t len, const char *what, uint32_t room, Dfa *out) {
    Nfa n = {0};
    uint32_t start;
    int rc = regex_nfa(re, len, &n, &start) ? df_failctx("%s", what) : dfa_from_nfa(&n, start, room, what, out);
    nfa_free(&n);
    return rc;
}

/* acc := acc ∩ d (acc empty-handed: d itself). d is consumed. */
static int narrow(Dfa *acc, int *have, Dfa *d, const char *what, uint32_t room) {
    if (!*have) {
        *acc = *d, *have = 1;
        return 0;
    }
    Dfa both;
    int rc = dfa_intersect(acc, d, room, what, &both);
    dfa_free(acc), dfa_free(d);
    *acc = both;
    return rc;
}

#define LENGTHS "'minLength'/'maxLength' with a pattern or format"

/* The longest word of d (pruned: every state leads to an accepting one) in symbols, or
 * UINT32_MAX when there is none (a cycle). Depth-first, a cycle being an edge back into the path. */
static uint32_t longest_word(const Dfa *d) {
    uint32_t n = d->n_states, sp = 0, result = 0;
    uint8_t *color = df_calloc(n, 1);
    uint32_t *longest = df_calloc(n, sizeof *longest), *stack = df_malloc(n * sizeof *stack), *next = df_malloc(n * sizeof *next);
    stack[sp] = 0, next[sp++] = d->first[0], color[0] = 1;
    while (sp && result != UINT32_MAX) {
        uint32_t s = stack[sp - 1];
        if (next[sp - 1] < d->first[s + 1]) {
            uint32_t t = d->e[next[sp - 1]++].to;
            if (color[t] == 1) result = UINT32_MAX;
            else if (!color[t]) color[t] = 1, stack[sp] = t, next[sp++] = d->first[t];
            continue;
        }
        for (uint32_t i = d->first[s]; i < d->first[s + 1]; i++)
            if (longest[d->e[i].to] + 1 > longest[s]) longest[s] = longest[d->e[i].to] + 1;
        color[s] = 2, sp--;
    }
    if (result != UINT32_MAX) result = longest[0];
    free(color), free(longest), free(stack), free(next);
    return result;
}

/* Whether every word of d (pruned) already has min..max characters. */
static int within_lengths(const Dfa *d, uint32_t min, uint32_t max) {
    uint32_t *dist = df_malloc(d->n_states * sizeof *dist);
    dfa_distances(d, dist);
    int ok = dist[0] >= min && (max == UINT32_MAX || longest_word(d) <= max);
    free(dist);
    return ok;
}

static int string_dfa(const char *pattern, size_t plen, const char *format, uint32_t min, uint32_t max, uint32_t room,
                      Dfa *acc) {
    Dfa d;
    int have = 0;
    memset(acc, 0, sizeof *acc);
    if (pattern && regex_dfa(pattern, plen, "'pattern'", room, &d)) return -1;
    if (pattern && narrow(acc, &have, &d, "'pattern'", room)) return -1;
    if (format) {
        const char *re = strfa_format_regex(format);
        if (!re)
            return df_fail("'format' \"%.40s\" cannot be enforced (these can: date-time, date, time, email, uuid, ipv4)",
                           format);
        if (regex_dfa(re, strlen(re), "'format'", room, &d) || narrow(acc, &have, &d, "'format' with 'pattern'", room))
            return -1;
    }
    dfa_prune(acc); /* (an empty language is reported below) */
    if ((min > 0 || max != UINT32_MAX) && !within_lengths(acc, min, max) &&
        (dfa_length(min, max, room, LENGTHS, &d) || narrow(acc, &have, &d, LENGTHS, room)))
        return -1;
    if (dfa_prune(acc))
        return df_fail("no string satisfies %s%s%s%s", pattern ? "'pattern'" : "", pattern && format ? " and " : "",
                       format ? "'format'" : "", min > 0 || max != UINT32_MAX ? " within 'minLength'/'maxLength'" : "");
    return 0;
}

int strfa_node(Grammar *g, const char *pattern, size_t plen, const char *format, uint32_t min, uint32_t max, int raw,
               uint32_t *node) {
    Dfa cp, bytes;
    /* what a grammar may still hold bounds the work of every automaton built for it */
    uint32_t left = GRAMMAR_MAX_DSTATES - g->n_dstates, room = left < AUTO_MAX_STATES ? left : AUTO_MAX_STATES;
    int lengths = min > 0 || max != UINT32_MAX;
    if (string_dfa(pattern, plen, format, min, max, room, &cp)) return dfa_free(&cp), -1;
    int rc = dfa_spell_utf8(&cp, !raw, room, lengths ? LENGTHS : pattern ? "'pattern'" : "'format'", &bytes);
    dfa_free(&cp);
    if (rc) return -1;
    dfa_prune(&bytes);
    *node = gb_dfa(g, &bytes);
    dfa_free(&bytes);
    return 0;
}

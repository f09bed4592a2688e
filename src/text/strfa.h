/* strfa.h - the strings a string schema with a pattern or a format allows, as one grammar node:
 * the pattern's language (regex.h), the format's (below), and the length bounds, intersected,
 * then spelled as JSON string text or raw tool-argument text (automaton.h).
 *
 * Formats, each a subset of what JSON Schema's validators (ajv-formats in full mode, RFC 3339)
 * accept, written the one way below:
 *   date       YYYY-MM-DD, days checked against the month and leap years
 *   time       HH:MM:SS[.fraction of 1-9 digits] then Z or +HH:MM / -HH:MM
 *   date-time  date "T" time
 *   email      lowercase local-part (letters, digits, . _ + - with no empty dot-separated part)
 *              "@" lowercase host labels of 1-63 characters, then a top-level label of 2-24 letters
 *   uuid       8-4-4-4-12 lowercase hexadecimal digits
 *   ipv4       four decimal numbers 0-255 without leading zeros
 * Every other format is refused, naming it. */
#ifndef DF_STRFA_H
#define DF_STRFA_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"

/* The node for strings matching pattern (UTF-8, plen bytes; NULL: none) and format (NULL: none)
 * with min..max characters (max UINT32_MAX: none); raw: tool-argument text instead of a JSON
 * string. Returns 0, or -1 with a message naming the keyword at fault. */
int strfa_node(Grammar *g, const char *pattern, size_t plen, const char *format, uint32_t min, uint32_t max, int raw,
               uint32_t *node);

/* The regular expression (regex.h's dialect) of a supported format, or NULL. */
const char *strfa_format_regex(const char *format);

#endif

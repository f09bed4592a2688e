/* pyjson.h - JSON text exactly as Python's json.dumps writes it, for the JSON that K3's chat
 * format embeds (docs/MODEL.md 6.3): tool declarations (separators "," ":" and keys sorted at every
 * depth) and tool-call argument values (separators ", " ": ", keys in their given order).
 * Floats use Python's repr (shortest round-trip digits; exponent form below 1e-4 or from 1e16),
 * strings are escaped as json.dumps does with ensure_ascii=False (non-ASCII kept as UTF-8; the
 * choice is inferred, the spec does not record it). Input is a jansson tree. */
#ifndef DF_PYJSON_H
#define DF_PYJSON_H

#include <jansson.h>

#include "text/strbuf.h"

typedef enum { PYJSON_SPACED = 0, PYJSON_COMPACT = 1 } PyJsonSeparators;

/* Appends the text of v to out. */
void pyjson_dump(const json_t *v, PyJsonSeparators sep, int sort_keys, StrBuf *out);

/* Python's repr(float) of x into buf (room for 32 bytes); returns the length. */
int pyjson_float_repr(double x, char *buf);

#endif

/* utf8stream.h - incremental UTF-8 decoding for streamed output. Bytes arrive in pieces (one
 * token's bytes at a time, and a character may be split across tokens); the stream returns
 * only text that is final: complete characters, and U+FFFD for each maximal ill-formed subpart
 * once it is known to be ill-formed. A trailing prefix that could still become a character is
 * held back (at most 3 bytes) until the next push or the finish. The concatenation of
 * everything returned equals decoding all the bytes at once (utf8_sanitize), so the stream of
 * a token sequence matches tok_decode of it.
 * The stream owns its buffer; returned text stays valid until the next call. */
#ifndef DF_UTF8STREAM_H
#define DF_UTF8STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t pend[4];
    size_t npend;
    uint8_t *buf;
    size_t cap;
} Utf8Stream;

#define UTF8STREAM_INIT {{0}, 0, NULL, 0}

/* Feeds b[0..n); returns the text now complete (*len bytes, possibly 0). */
const char *utf8stream_push(Utf8Stream *s, const uint8_t *b, size_t n, size_t *len);
/* Ends the stream: a held incomplete sequence becomes one U+FFFD. The stream is then empty and
 * can be reused. */
const char *utf8stream_finish(Utf8Stream *s, size_t *len);
void utf8stream_free(Utf8Stream *s);

#endif

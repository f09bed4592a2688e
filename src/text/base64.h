/* base64.h - RFC 4648 base64 (standard alphabet, '=' padding), as tiktoken.model stores tokens. */
#ifndef DF_BASE64_H
#define DF_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Decodes s[0..n) into out (room for n / 4 * 3 bytes). Returns the decoded length, or -1 when
 * the text is not canonical padded base64 (length not a multiple of 4, a character outside the
 * alphabet, '=' anywhere but the last two places). */
long base64_decode(const char *s, size_t n, uint8_t *out);

/* Encodes s[0..n) into out (room for (n + 2) / 3 * 4 + 1 bytes, NUL-terminated); returns the
 * encoded length. */
size_t base64_encode(const uint8_t *s, size_t n, char *out);

#endif

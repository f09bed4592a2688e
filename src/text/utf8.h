/* utf8.h - UTF-8 decoding with replacement, exactly as Python's bytes.decode("utf-8", "replace")
 * and the WHATWG TextDecoder do it: each maximal ill-formed subpart (Unicode 15, section 3.9,
 * "U+FFFD substitution of maximal subparts") becomes one U+FFFD. The tokenizer uses it to
 * sanitise input before encoding and to decode token bytes; the streaming decoder uses the
 * incomplete-sequence status to hold back split characters. No allocation here. */
#ifndef DF_UTF8_H
#define DF_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT 0xFFFDu

typedef enum {
    UTF8_OK,    /* s[0..*len) encodes *cp */
    UTF8_BAD,   /* s[0..*len) is a maximal ill-formed subpart: replace it by one U+FFFD */
    UTF8_SHORT, /* all n bytes are a well-formed but incomplete prefix (*len = n) */
} Utf8Status;

/* Examines the sequence starting at s[0] (n >= 1). */
Utf8Status utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *len);

/* Length of the longest prefix of s[0..n) that is well-formed UTF-8. */
size_t utf8_valid_len(const uint8_t *s, size_t n);

/* Writes s[0..n) to dst with every maximal ill-formed subpart (a truncated tail included)
 * replaced by U+FFFD; returns the bytes written. With dst NULL it only counts them. */
size_t utf8_sanitize(const uint8_t *s, size_t n, uint8_t *dst);

/* Encodes cp (<= 0x10FFFF) into out; returns 1..4. */
size_t utf8_encode(uint32_t cp, uint8_t out[4]);

/* Python's str.strip() on valid UTF-8: sets *start past leading white space (utf8_is_pyspace)
 * and returns the length left once trailing white space is dropped too. */
size_t utf8_pystrip(const uint8_t *s, size_t n, size_t *start);

/* Python's str.isspace(): Unicode White_Space plus U+001C..U+001F (bidi classes B and S),
 * minus nothing else. K3's long-run splitting classifies characters with it. */
int utf8_is_pyspace(uint32_t cp);

#endif

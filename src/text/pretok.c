#include "text/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "util/err.h"

const char PRETOK_K3_PATTERN[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

/* Unicode White_Space, which is what Rust's \s means (class body, without brackets). */
#define WS                                                                                     \
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
    "\\x{205F}\\x{3000}"
#define HAN "\\p{sc:Han}"
/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]: every code point has exactly one general
 * category, so "one of Lu Lt Lm Lo M, and not Han" is "none of the other categories (Ll N P S
 * Z C, unassigned included in C), and not Han". */
#define UPPERISH "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}" HAN "]"
/* [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]], by the same complement. */
#define LOWERISH "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}" HAN "]"
#define CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

static const char PATTERN_PCRE2[] =
    HAN "+"
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "*" LOWERISH "+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "+" LOWERISH "*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

struct Pretok {
    pcre2_code *re;
    int jit;
};

Pretok *pretok_new(void) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)PATTERN_PCRE2, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        df_fail("tokenizer: pre-tokenisation pattern does not compile at offset %zu: %s", (size_t)at,
                (char *)msg);
        return NULL;
    }
    Pretok *p = df_calloc(1, sizeof *p);
    p->re = re;
    p->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return p;
}

void pretok_free(Pretok *p) {
    if (!p) return;
    pcre2_code_free(p->re);
    free(p);
}

int pretok_iter_init(PretokIter *it, const Pretok *p) {
    *it = (PretokIter){.p = p};
    it->md = pcre2_match_data_create(1, NULL);
    return it->md ? 0 : df_fail("out of memory creating PCRE2 match data");
}

void pretok_iter_set(PretokIter *it, const uint8_t *s, size_t n) {
    it->s = s, it->n = n, it->pos = 0;
}

void pretok_iter_end(PretokIter *it) {
    pcre2_match_data_free(it->md);
    it->md = NULL;
}

int pretok_next(PretokIter *it, size_t *start, size_t *len) {
    if (it->pos >= it->n) return 0;
    pcre2_match_data *md = it->md;
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (it->p->jit) rc = pcre2_jit_match(it->p->re, it->s, it->n, it->pos, 0, md, NULL);
    /* The interpreter keeps its backtracking state on the heap: it copes with pieces whose
     * backtracking outgrows the JIT's default stack. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(it->p->re, it->s, it->n, it->pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return df_fail("tokenizer: pre-tokenisation failed at byte %zu: %s", it->pos, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] != it->pos || ov[1] <= ov[0])
        return df_fail("tokenizer: pre-tokenisation matched an empty or misplaced piece at byte %zu", it->pos);
    *start = ov[0], *len = ov[1] - ov[0];
    it->pos = ov[1];
    return 1;
}

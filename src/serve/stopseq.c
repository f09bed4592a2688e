#include "serve/stopseq.h"

#include <string.h>

void stopseq_init(StopSeq *s) { memset(s, 0, sizeof *s); }

void stopseq_free(StopSeq *s) {
    for (int i = 0; i < s->n; i++) free(s->seq[i]);
    sb_free(&s->held);
    sb_free(&s->out);
    memset(s, 0, sizeof *s);
}

void stopseq_add(StopSeq *s, const char *seq, size_t len) {
    if (s->n == STOPSEQ_MAX || len == 0 || len > STOPSEQ_MAX_LEN) return;
    s->seq[s->n] = df_malloc(len);
    memcpy(s->seq[s->n], seq, len);
    s->len[s->n++] = len;
}

/* The first position in held where a whole sequence starts, or held.n; *which: that sequence
 * (the earlier one in the list when two start there). */
static size_t first_match(const StopSeq *s, int *which) {
    size_t best = s->held.n;
    for (int i = 0; i < s->n; i++) {
        const char *p = s->held.n >= s->len[i] ? memmem(s->held.p, s->held.n, s->seq[i], s->len[i]) : NULL;
        if (p && (size_t)(p - s->held.p) < best) best = (size_t)(p - s->held.p), *which = i;
    }
    return best;
}

/* The first position from which the rest of held could still grow into a sequence. */
static size_t first_partial(const StopSeq *s) {
    for (size_t at = 0; at < s->held.n; at++) {
        size_t rest = s->held.n - at;
        for (int i = 0; i < s->n; i++)
            if (rest < s->len[i] && !memcmp(s->held.p + at, s->seq[i], rest)) return at;
    }
    return s->held.n;
}

/* Moves held[0..cut) to out, backing cut up to a character start (a UTF-8 continuation byte
 * never begins what stays held). */
static void release(StopSeq *s, size_t cut) {
    while (cut > 0 && cut < s->held.n && ((unsigned char)s->held.p[cut] & 0xC0) == 0x80) cut--;
    sb_add(&s->out, s->held.p, cut);
    memmove(s->held.p, s->held.p + cut, s->held.n - cut);
    s->held.n -= cut;
    s->held.p[s->held.n] = 0;
}

void stopseq_push(StopSeq *s, const char *text, size_t n) {
    if (s->hit || n == 0) return;
    sb_add(&s->held, text, n);
    size_t m = first_match(s, &s->which);
    if (m < s->held.n) {
        sb_add(&s->out, s->held.p, m);
        s->held.n = 0;
        s->hit = 1;
        return;
    }
    release(s, first_partial(s));
}

void stopseq_flush(StopSeq *s) {
    if (!s->hit && s->held.n) sb_add(&s->out, s->held.p, s->held.n);
    s->held.n = 0;
}

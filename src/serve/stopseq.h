/* stopseq.h - OpenAI's `stop` sequences over streamed text. Text goes in as it is generated;
 * what comes out is the same text up to (not including) the first occurrence of any stop
 * sequence, minus a tail held back while it could still be the start of one. Held text is cut
 * only at character boundaries, so every piece that comes out is valid UTF-8. The StopSeq owns
 * copies of its sequences and its buffers. */
#ifndef DF_STOPSEQ_H
#define DF_STOPSEQ_H

#include <stddef.h>

#include "text/strbuf.h"

#define STOPSEQ_MAX 4
#define STOPSEQ_MAX_LEN 256

typedef struct {
    char *seq[STOPSEQ_MAX];
    size_t len[STOPSEQ_MAX];
    int n;
    int hit;         /* a sequence was found: nothing more comes out */
    int which;       /* which one (index in the order added) */
    StrBuf held;     /* text that might begin a sequence */
    StrBuf out;      /* what the last calls released (the caller empties it) */
} StopSeq;

void stopseq_init(StopSeq *s);
void stopseq_free(StopSeq *s);
/* Adds a sequence (1..STOPSEQ_MAX_LEN bytes; at most STOPSEQ_MAX of them). */
void stopseq_add(StopSeq *s, const char *seq, size_t len);
/* Appends to s->out the part of text[0..n) that is now final. */
void stopseq_push(StopSeq *s, const char *text, size_t n);
/* The text ended without a stop: appends everything held to s->out. */
void stopseq_flush(StopSeq *s);

#endif

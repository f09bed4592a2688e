/* reply.h - turns generated token ids into the text a client sees. A chat reply goes through
 * K3's reply parser (reasoning vs answer, markers dropped, stop at <|end_of_msg|>); a raw
 * completion is the tokens' bytes as UTF-8, a character split across tokens held until
 * complete. Owns its parser and buffers; borrows the tokenizer. */
#ifndef DF_REPLY_H
#define DF_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "text/strbuf.h"
#include "text/tokenizer.h"
#include "text/utf8stream.h"
#include "text/xtml.h"

typedef struct {
    const char *reasoning, *content; /* valid until the next call */
    size_t reasoning_len, content_len;
    int done;                        /* chat: <|end_of_msg|> (not counted as a completion token) */
    int channel;                     /* the token's bytes: XTML_MARKUP, XTML_THINKING or XTML_ANSWER
                                      * (a completion's are all XTML_ANSWER) */
} ReplyDelta;

typedef struct {
    const Tokenizer *tok;
    int chat;
    XtmlParser *parser;   /* chat */
    Utf8Stream raw;       /* completion */
    StrBuf reasoning, content; /* everything so far, for non-streamed answers */
} Reply;

/* chat: 1 for a chat reply (thinking on), 0 for a raw completion. Returns 0 or -1. */
int reply_init(Reply *r, const Tokenizer *tok, int chat);
void reply_free(Reply *r);
/* One generated token. Returns 0, or -1 with a message (an id outside the vocabulary). */
int reply_feed(Reply *r, int32_t id, ReplyDelta *d);
/* The reply was cut short: releases held bytes. */
void reply_finish(Reply *r, ReplyDelta *d);

#endif

#include "serve/reply.h"

#include <string.h>

#include "util/err.h"

int reply_init(Reply *r, const Tokenizer *tok, int chat) {
    memset(r, 0, sizeof *r);
    r->tok = tok;
    r->chat = chat;
    r->raw = (Utf8Stream)UTF8STREAM_INIT;
    if (chat && !(r->parser = xtml_parser_new(tok, 1))) return -1;
    return 0;
}

void reply_free(Reply *r) {
    if (r->parser) xtml_parser_free(r->parser);
    utf8stream_free(&r->raw);
    sb_free(&r->reasoning);
    sb_free(&r->content);
    memset(r, 0, sizeof *r);
}

static void keep(Reply *r, ReplyDelta *d) {
    sb_add(&r->reasoning, d->reasoning ? d->reasoning : "", d->reasoning_len);
    sb_add(&r->content, d->content ? d->content : "", d->content_len);
}

int reply_feed(Reply *r, int32_t id, ReplyDelta *d) {
    memset(d, 0, sizeof *d);
    if (r->chat) {
        XtmlDelta x;
        if (xtml_parser_feed(r->parser, id, &x)) return -1;
        *d = (ReplyDelta){x.reasoning, x.content, x.reasoning_len, x.content_len, x.done, x.channel};
    } else {
        size_t n;
        const uint8_t *b = tok_token_bytes(r->tok, id, &n);
        if (!b) return df_fail("token %d is outside the vocabulary", (int)id);
        d->content = utf8stream_push(&r->raw, b, n, &d->content_len);
        d->channel = XTML_ANSWER;
    }
    keep(r, d);
    return 0;
}

void reply_finish(Reply *r, ReplyDelta *d) {
    memset(d, 0, sizeof *d);
    if (r->chat) {
        XtmlDelta x = {0};
        xtml_parser_finish(r->parser, &x);
        *d = (ReplyDelta){x.reasoning, x.content, x.reasoning_len, x.content_len, x.done, XTML_MARKUP};
    } else
        d->content = utf8stream_finish(&r->raw, &d->content_len);
    keep(r, d);
}

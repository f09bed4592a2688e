#include "text/utf8stream.h"

#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"
#include "util/err.h"

/* buf holds the output in [0, 3m) and the m input bytes (held + new) after it: no input byte
 * yields more than 3 output bytes, so the regions never meet. */
static uint8_t *room(Utf8Stream *s, size_t in) {
    size_t need = 4 * in + 4;
    if (need > s->cap) {
        s->cap = need < 256 ? 256 : need;
        s->buf = df_realloc(s->buf, s->cap);
    }
    return s->buf;
}

const char *utf8stream_push(Utf8Stream *s, const uint8_t *b, size_t n, size_t *len) {
    size_t m = s->npend + n;
    uint8_t *buf = room(s, m), *in = buf + 3 * m;
    memcpy(in, s->pend, s->npend);
    memcpy(in + s->npend, b, n);
    s->npend = 0;
    size_t o = 0;
    for (size_t i = 0; i < m;) {
        uint32_t cp;
        size_t l;
        Utf8Status st = utf8_next(in + i, m - i, &cp, &l);
        if (st == UTF8_SHORT) { /* may still complete: hold it */
            memcpy(s->pend, in + i, l);
            s->npend = l;
            break;
        }
        if (st == UTF8_OK) memcpy(buf + o, in + i, l), o += l;
        else o += utf8_encode(UTF8_REPLACEMENT, buf + o);
        i += l;
    }
    *len = o;
    return (const char *)buf;
}

const char *utf8stream_finish(Utf8Stream *s, size_t *len) {
    uint8_t *buf = room(s, 1);
    *len = s->npend ? utf8_encode(UTF8_REPLACEMENT, buf) : 0;
    s->npend = 0;
    return (const char *)buf;
}

void utf8stream_free(Utf8Stream *s) {
    free(s->buf);
    *s = (Utf8Stream)UTF8STREAM_INIT;
}

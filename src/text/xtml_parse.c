/* xtml_parse.c - the reply state machine (see xtml.h). It tracks the element stack the markers
 * describe: text inside <think> is reasoning, text inside <response> (or directly inside the
 * message) is the answer, <tools><call><argument> build structured calls, and everything
 * between <|open|>/<|close|> and <|sep|> is a header that never reaches the output. */
#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"
#include "text/strbuf.h"
#include "text/utf8.h"
#include "text/utf8stream.h"
#include "text/xtml.h"

#define MAX_DEPTH 32
#define MAX_HEADER 4096
#define MAX_TAG 32

typedef enum { EL_MESSAGE, EL_THINK, EL_RESPONSE, EL_TOOLS, EL_CALL, EL_ARGUMENT, EL_JSON, EL_OTHER } ElKind;

typedef struct {
    ElKind kind;
    char tag[MAX_TAG];
} Element;

struct XtmlParser {
    const Tokenizer *tok;
    int32_t id_open, id_close, id_sep, id_eom;
    Element stack[MAX_DEPTH];
    int depth, done;
    enum { M_TEXT, M_OPEN_HEADER, M_CLOSE_HEADER } mode;
    StrBuf header;
    Utf8Stream reasoning, content;
    StrBuf value;          /* raw bytes of the current argument or json element */
    char *arg_key, *arg_type;
    char *call_name, *raw_args;
    json_t *call_args;     /* object under construction for the current call */
    json_t *calls;
};

static ElKind kind_of(const char *tag) {
    static const char *const names[] = {"message", "think", "response", "tools", "call", "argument", "json"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(tag, names[i])) return (ElKind)i;
    return EL_OTHER;
}

XtmlParser *xtml_parser_new(const Tokenizer *tok, int thinking) {
    XtmlParser *p = df_calloc(1, sizeof *p);
    p->tok = tok;
    p->id_open = tok_special_id(tok, "<|open|>");
    p->id_close = tok_special_id(tok, "<|close|>");
    p->id_sep = tok_special_id(tok, "<|sep|>");
    p->id_eom = tok_special_id(tok, "<|end_of_msg|>");
    if (p->id_open < 0 || p->id_close < 0 || p->id_sep < 0 || p->id_eom < 0) {
        free(p);
        df_fail("tokenizer lacks K3's chat markers (<|open|> <|close|> <|sep|> <|end_of_msg|>)");
        return NULL;
    }
    p->stack[0] = (Element){EL_MESSAGE, "message"};
    p->stack[1] = thinking ? (Element){EL_THINK, "think"} : (Element){EL_RESPONSE, "response"};
    p->depth = 2;
    p->calls = json_array();
    return p;
}

static void clear_call(XtmlParser *p) {
    free(p->call_name), free(p->raw_args), free(p->arg_key), free(p->arg_type);
    json_decref(p->call_args);
    p->call_name = p->raw_args = p->arg_key = p->arg_type = NULL;
    p->call_args = NULL;
}

void xtml_parser_free(XtmlParser *p) {
    if (!p) return;
    clear_call(p);
    sb_free(&p->header), sb_free(&p->value);
    utf8stream_free(&p->reasoning), utf8stream_free(&p->content);
    json_decref(p->calls);
    free(p);
}

const json_t *xtml_parser_tool_calls(const XtmlParser *p) { return p->calls; }

int xtml_parser_in_thinking(const XtmlParser *p) {
    if (p->done) return 0;
    for (int i = 0; i < p->depth; i++)
        if (p->stack[i].kind == EL_THINK) return 1;
    return 0;
}

/* The value of attribute key in a header (` key="value"`, &quot; and &amp; undone), or NULL. */
static char *header_attr(const char *h, const char *key) {
    size_t klen = strlen(key);
    for (const char *s = strchr(h, ' '); s; s = strchr(s + 1, ' ')) {
        if (strncmp(s + 1, key, klen) || strncmp(s + 1 + klen, "=\"", 2)) continue;
        const char *v = s + 1 + klen + 2, *end = strchr(v, '"');
        if (!end) return NULL;
        StrBuf b = {0};
        sb_add(&b, "", 0);
        while (v < end) {
            if (!strncmp(v, "&quot;", 6)) sb_add(&b, "\"", 1), v += 6;
            else if (!strncmp(v, "&amp;", 5)) sb_add(&b, "&", 1), v += 5;
            else sb_add(&b, v++, 1);
        }
        return b.p;
    }
    return NULL;
}

static char *text_of(StrBuf *b) {
    char *s = df_malloc(utf8_sanitize((const uint8_t *)b->p, b->n, NULL) + 1);
    s[utf8_sanitize((const uint8_t *)b->p, b->n, (uint8_t *)s)] = 0;
    return s;
}

static void open_element(XtmlParser *p) {
    char *h = text_of(&p->header);
    size_t tl = strcspn(h, " ");
    Element e = {EL_OTHER, ""};
    memcpy(e.tag, h, tl < MAX_TAG ? tl : MAX_TAG - 1);
    e.kind = kind_of(e.tag);
    if (e.kind == EL_CALL) {
        clear_call(p);
        p->call_name = header_attr(h, "tool");
        p->call_args = json_object();
    } else if (e.kind == EL_ARGUMENT || e.kind == EL_JSON) {
        free(p->arg_key), free(p->arg_type);
        p->arg_key = header_attr(h, "key");
        p->arg_type = header_attr(h, "type");
        p->value.n = 0;
    }
    if (p->depth < MAX_DEPTH) p->stack[p->depth++] = e;
    free(h);
}

/* A typed argument value: strings verbatim, other types parsed as JSON (kept as a string when
 * they do not parse). */
static void end_argument(XtmlParser *p) {
    char *v = text_of(&p->value);
    json_t *j = NULL;
    if (p->arg_type && strcmp(p->arg_type, "string")) j = json_loads(v, JSON_DECODE_ANY, NULL);
    if (!j) j = json_string(v);
    if (p->call_args && p->arg_key) json_object_set_new(p->call_args, p->arg_key, j);
    else json_decref(j);
    free(v);
}

static void end_call(XtmlParser *p) {
    StrBuf args = {0};
    if (p->raw_args) sb_adds(&args, p->raw_args);
    else if (p->call_args) pyjson_dump(p->call_args, PYJSON_SPACED, 0, &args);
    json_array_append_new(p->calls, json_pack("{s:s, s:{s:s, s:s}}", "type", "function", "function", "name",
                                              p->call_name ? p->call_name : "", "arguments", args.p ? args.p : "{}"));
    sb_free(&args);
    clear_call(p);
}

static void end_element(XtmlParser *p, ElKind k, XtmlDelta *d) {
    if (k == EL_THINK) d->reasoning = utf8stream_finish(&p->reasoning, &d->reasoning_len);
    else if (k == EL_RESPONSE) d->content = utf8stream_finish(&p->content, &d->content_len);
    else if (k == EL_ARGUMENT) end_argument(p);
    else if (k == EL_JSON) {
        free(p->raw_args);
        p->raw_args = text_of(&p->value);
    } else if (k == EL_CALL) end_call(p);
}

/* Closes the innermost open element with this tag and any left open inside it. */
static void close_element(XtmlParser *p, XtmlDelta *d) {
    char *tag = text_of(&p->header);
    int at = p->depth - 1;
    while (at >= 0 && strncmp(p->stack[at].tag, tag, MAX_TAG - 1)) at--;
    while (at >= 0 && p->depth > at) end_element(p, p->stack[--p->depth].kind, d);
    free(tag);
}

static void route_text(XtmlParser *p, const uint8_t *b, size_t n, XtmlDelta *d) {
    if (p->mode != M_TEXT) {
        if (p->header.n + n <= MAX_HEADER) sb_add(&p->header, b, n);
        return;
    }
    ElKind k = p->depth ? p->stack[p->depth - 1].kind : EL_OTHER;
    if (k == EL_THINK) {
        d->reasoning = utf8stream_push(&p->reasoning, b, n, &d->reasoning_len);
        d->channel = XTML_THINKING;
    } else if (k == EL_RESPONSE || k == EL_MESSAGE) {
        d->content = utf8stream_push(&p->content, b, n, &d->content_len);
        d->channel = XTML_ANSWER;
    }
    else if (k == EL_ARGUMENT || k == EL_JSON) sb_add(&p->value, b, n);
}

int xtml_parser_feed(XtmlParser *p, int32_t id, XtmlDelta *d) {
    *d = (XtmlDelta){.done = p->done};
    size_t n;
    const uint8_t *b = tok_token_bytes(p->tok, id, &n);
    if (!b) return df_fail("generated id %d is outside the vocabulary", id);
    if (p->done) return 0;
    if (id == p->id_eom) {
        xtml_parser_finish(p, d);
        p->done = d->done = 1;
    } else if (id == p->id_open || id == p->id_close) {
        p->mode = id == p->id_open ? M_OPEN_HEADER : M_CLOSE_HEADER;
        p->header.n = 0;
    } else if (id == p->id_sep) {
        if (p->mode == M_OPEN_HEADER) open_element(p);
        else if (p->mode == M_CLOSE_HEADER) close_element(p, d);
        p->mode = M_TEXT;
    } else if (!tok_is_special(p->tok, id))
        route_text(p, b, n, d);
    return 0;
}

void xtml_parser_finish(XtmlParser *p, XtmlDelta *d) {
    d->reasoning = utf8stream_finish(&p->reasoning, &d->reasoning_len);
    d->content = utf8stream_finish(&p->content, &d->content_len);
}

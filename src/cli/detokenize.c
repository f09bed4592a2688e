/* deltafin detokenize - read token ids (decimal, separated by white space) on stdin and print
 * their text. Text is decoded as it streams, through the same incremental decoder `run` uses,
 * so the output equals tok_decode of all the ids (invalid UTF-8 -> U+FFFD). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "text/tokenizer.h"
#include "text/utf8stream.h"
#include "util/err.h"

/* Reads the next id; returns 1, 0 at end of input, -1 with a message on a malformed id. */
static int read_id(FILE *f, long long *id, long long index) {
    int c;
    while ((c = getc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') {}
    if (c == EOF) return 0;
    long long v = 0;
    int digits = 0;
    for (; c >= '0' && c <= '9'; c = getc(f), digits++)
        if ((v = v * 10 + (c - '0')) > 1000000000LL) return df_fail("stdin: token %lld: id is too large", index);
    if (!digits || (c != EOF && c != ' ' && c != '\n' && c != '\t' && c != '\r'))
        return df_fail("stdin: token %lld: expected a decimal token id", index);
    *id = v;
    return 1;
}

int cmd_detokenize(Settings *set, int argc, char **argv) {
    static const char about[] =
        "Reads token ids (decimal, separated by white space) on stdin and prints their text with the model's "
        "tokenizer, decoded as it streams (invalid UTF-8 becomes U+FFFD).";
    const CliCommand cmd = {"detokenize", "[options] < IDS", about, NULL, 0, 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    ModelDir m;
    cli_model_dir(set, MODEL_TOKENIZER, &m);
    Tokenizer *tok = tok_load(m.dir);
    if (!tok) df_die("%s", df_errmsg());
    Utf8Stream st = UTF8STREAM_INIT;
    long long id = 0, index = 0;
    int rc;
    size_t len, n;
    while ((rc = read_id(stdin, &id, index)) == 1) {
        const uint8_t *b = tok_token_bytes(tok, (int32_t)id, &n);
        if (!b) {
            df_fail("stdin: token %lld: id %lld is outside the vocabulary (0..%d)", index, id, tok_vocab_size(tok) - 1);
            rc = -1;
            break;
        }
        const char *text = utf8stream_push(&st, b, n, &len);
        fwrite(text, 1, len, stdout);
        index++;
    }
    const char *tail = utf8stream_finish(&st, &len);
    if (rc == 0) fwrite(tail, 1, len, stdout);
    utf8stream_free(&st);
    tok_free(tok);
    if (rc < 0) df_die("%s", df_errmsg());
    return fflush(stdout) == 0 ? 0 : 1;
}

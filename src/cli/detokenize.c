/* deltafin detokenize - read token ids (decimal, separated by white space) on stdin and print
 * their text. Text is decoded as it streams, through the same incremental decoder `run` uses,
 * so the output equals tok_decode of all the ids (invalid UTF-8 -> U+FFFD). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
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

int cmd_detokenize(const Settings *set, int argc, char **argv) {
    const char *model = NULL;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model, "model directory with tiktoken.model (default $DELTAFIN_ROOT or .)"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 1, pos, 0, &n_pos, "deltafin detokenize [--model DIR] < ids"))
        df_die("%s", df_errmsg());
    Tokenizer *tok = tok_load(settings_dir(set, model));
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

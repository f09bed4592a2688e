/* train_bpe - trains a byte-level BPE vocabulary on a corpus with the engine's own trainer
 * (text/bpe_train.h: K3's pre-tokenisation regex, most frequent pair first) and writes it as K3
 * tokenizer files (text/vocab_write.h), so `deltafin tokenize`, chat and the server load it
 * like K3's own. The result is a pure function of the documents (in file order) and the size.
 *
 *   train_bpe --docs train.jsonl --out DIR [--mergeable 8192]
 *
 * Input: JSON Lines, one object per document with its text in "text". Output: DIR/tiktoken.model
 * (the 256 single bytes, then the merges in the order learned) and DIR/tokenizer_config.json
 * (the 256 special ids after the mergeable ranks, K3's spellings at K3's offsets). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/opts.h"
#include "cli/die.h"
#include "jsonl.h"
#include "text/bpe_train.h"
#include "text/rankmap.h"
#include "text/vocab_write.h"
#include "util/err.h"
#include "util/fileio.h"

#define MAX_MERGEABLE (65536 - 256) /* ids must fit the uint16 training files */

typedef struct {
    char **v;
    int n, cap;
    size_t bytes;
} Docs;

/* Reads every document's text. Jansson refuses invalid UTF-8 and, without JSON_ALLOW_NUL, a
 * NUL inside a string: the texts are the NUL-terminated valid UTF-8 bpe_train needs. */
static int read_docs(const char *path, Docs *d) {
    JsonlReader r;
    if (jsonl_open(&r, path)) return -1;
    json_t *obj = NULL;
    int rc;
    while ((rc = jsonl_next(&r, &obj)) == 1) {
        size_t len = 0;
        const char *text = jsonl_string(&r, obj, "text", &len);
        if (!text) {
            json_decref(obj);
            rc = -1;
            break;
        }
        if (d->n == d->cap) {
            if (d->cap >= (1 << 29)) {
                json_decref(obj);
                rc = df_fail("%s: too many documents", path);
                break;
            }
            d->cap = d->cap ? d->cap * 2 : 4096;
            d->v = df_realloc(d->v, (size_t)d->cap * sizeof *d->v);
        }
        d->v[d->n++] = df_strdup(text);
        d->bytes += len;
        json_decref(obj);
    }
    jsonl_close(&r);
    return rc;
}

int main(int argc, char **argv) {
    const char *docs_path = NULL, *out = NULL;
    int64_t mergeable = 8192;
    const CliOpt opts[] = {
        CLI_STR("docs", 0, &docs_path, "FILE", "JSON Lines corpus, one {\"text\": ...} per document"),
        CLI_STR("out", 0, &out, "DIR", "directory for tiktoken.model and tokenizer_config.json (created)"),
        CLI_INT("mergeable", 0, &mergeable, "N", "mergeable tokens including the 256 bytes (default 8192)", 0, 0),
    };
    const CliCommand cmd = {"train_bpe", "--docs FILE.jsonl --out DIR [--mergeable N]",
                            "Trains the byte-pair tokenizer on a corpus.", opts, CLI_N(opts), 0, NULL, 1};
    cli_parse(&cmd, NULL, argc, argv, NULL, NULL);
    if (!docs_path || !out) df_die("--docs and --out are required (see --help)");
    if (mergeable < 257 || mergeable > MAX_MERGEABLE)
        df_die("--mergeable %lld: must be 257..%d", (long long)mergeable, MAX_MERGEABLE);
    Docs d = {0};
    if (read_docs(docs_path, &d) || file_mkdirs(out)) df_die("%s", df_errmsg());
    clock_t t0 = clock();
    RankMap m;
    rankmap_init_bytes(&m);
    int want = (int)mergeable - 256;
    int got = bpe_train((const char *const *)d.v, d.n, want, &m);
    if (got < 0) df_die("%s: %s", docs_path, df_errmsg());
    if (got < want) df_die("%s: the corpus yields only %d merges; --mergeable at most %d", docs_path, got, got + 256);
    if (vocab_write_k3(out, &m)) df_die("%s", df_errmsg());
    fprintf(stderr, "train_bpe: %d documents, %zu bytes, %d merges in %.1f s CPU -> %s\n", d.n, d.bytes, got,
            (double)(clock() - t0) / CLOCKS_PER_SEC, out);
    rankmap_free(&m);
    for (int i = 0; i < d.n; i++) free(d.v[i]);
    free(d.v);
    return 0;
}

/* bench_tokenizer - single-core encode throughput and memory of the tokenizer.
 *
 *   build/bench/bench_tokenizer [--model DIR] [--mb N]
 *
 * Without --model it writes the 8,192-token synthetic vocabulary to a scratch directory. Texts
 * are the built-in corpus's English, source-code and multilingual documents repeated to N MB
 * (default 16). Throughput is the median of 5 runs of tok_encode on the whole text; memory is
 * the growth of peak RSS while encoding 4x larger inputs, per input byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cli/die.h"
#include "synth/synth_corpus.h"
#include "synth/vocab_synth.h"
#include "text/tokenizer.h"
#include "util/err.h"

static long peak_rss_kb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* Documents [first, last) of the corpus, repeated to at least bytes. */
static char *repeat_docs(int first, int last, size_t bytes, size_t *len) {
    char *s = df_malloc(bytes + 65536);
    size_t n = 0;
    while (n < bytes)
        for (int d = first; d < last && n < bytes; d++) {
            size_t l = strlen(SYNTH_CORPUS[d]);
            memcpy(s + n, SYNTH_CORPUS[d], l);
            n += l;
        }
    *len = n;
    return s;
}

static void throughput(const Tokenizer *t, const char *name, const char *text, size_t len) {
    double mbs[5];
    size_t tokens = 0;
    for (int r = 0; r < 5; r++) {
        TokIds ids = {0};
        tokids_reserve(&ids, len / 2);
        double t0 = df_now();
        if (tok_encode(t, text, len, 0, &ids)) df_die("%s", df_errmsg());
        mbs[r] = (double)len / 1e6 / (df_now() - t0);
        tokens = ids.n;
        tokids_free(&ids);
    }
    qsort(mbs, 5, sizeof *mbs, bench_cmp_double);
    printf("%-12s %8.1f MB %10zu tokens %6.2f bytes/token  %6.1f MB/s (min %.1f, max %.1f)\n", name, (double)len / 1e6,
           tokens, (double)len / (double)tokens, mbs[2], mbs[0], mbs[4]);
}

/* Peak RSS growth while encoding (the input already resident), per input byte, for inputs
 * growing 4x: a constant ratio means memory linear in the input. The id array's own share
 * (4 bytes per token, capacity doubling) is shown beside it. */
static void memory(const Tokenizer *t, int first, int last) {
    for (size_t mb = 4; mb <= 64; mb *= 4) {
        size_t len;
        char *text = repeat_docs(first, last, mb << 20, &len);
        long before = peak_rss_kb();
        TokIds ids = {0};
        if (tok_encode(t, text, len, 0, &ids)) df_die("%s", df_errmsg());
        long grown = peak_rss_kb() - before;
        printf("memory      %3zu MB input: peak RSS +%6ld MB = %.2f bytes per input byte (ids alone %.2f)\n", mb,
               grown >> 10, (double)grown * 1024 / (double)len, (double)ids.cap * 4 / (double)len);
        tokids_free(&ids);
        free(text);
    }
}

int main(int argc, char **argv) {
    const char *model = NULL;
    size_t mb = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = (size_t)atol(argv[++i]);
        else df_die("usage: bench_tokenizer [--model DIR] [--mb N]");
    }
    char scratch[] = "/tmp/bench-tok-XXXXXX";
    if (!model) {
        if (!mkdtemp(scratch) || vocab_write_synthetic(scratch, 8192, 1)) df_die("synthetic vocabulary: %s", df_errmsg());
        model = scratch;
    }
    double t0 = df_now();
    Tokenizer *t = tok_load(model);
    if (!t) df_die("%s", df_errmsg());
    printf("vocabulary  %s: %d tokens, loaded in %.0f ms\n", model == scratch ? "synthetic" : model, tok_vocab_size(t),
           (df_now() - t0) * 1e3);
    memory(t, 0, SYNTH_CORPUS_CODE_FIRST); /* first: peak RSS only grows */
    struct {
        const char *name;
        int first, last;
    } sets[] = {{"english", 0, SYNTH_CORPUS_CODE_FIRST},
                {"code", SYNTH_CORPUS_CODE_FIRST, SYNTH_CORPUS_OTHER_FIRST},
                {"multilingual", SYNTH_CORPUS_OTHER_FIRST, SYNTH_CORPUS_DOCS}};
    for (int s = 0; s < 3; s++) {
        size_t len;
        char *text = repeat_docs(sets[s].first, sets[s].last, mb << 20, &len);
        throughput(t, sets[s].name, text, len);
        free(text);
    }
    tok_free(t);
    if (model == scratch) {
        char path[64];
        snprintf(path, sizeof path, "%s/tiktoken.model", scratch), unlink(path);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", scratch), unlink(path);
        rmdir(scratch);
    }
    return 0;
}

/* fuzz.h - shared by the libFuzzer harnesses (tests/fuzz/fuzz_NAME.c, built by `make fuzz`).
 *
 * A harness defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize); it must leave
 * no memory behind (the runs detect leaks) and check what must hold for every input with
 * FUZZ_ASSERT, which aborts so libFuzzer saves the input as a crash. Seeds live in
 * tests/fuzz/corpus/NAME/; tests/fuzz/run.sh runs every harness (see docs/FUZZING.md). */
#ifndef DF_FUZZ_H
#define DF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "synth/vocab_synth.h"
#include "text/tokenizer.h"
#include "util/err.h"

#define FUZZ_ASSERT(cond)                                                                     \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: FUZZ_ASSERT(%s) failed (last error: %s)\n", __FILE__,     \
                    __LINE__, #cond, df_errmsg());                                            \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A failure must leave a one-line message without control characters. */
static inline void fuzz_check_message(void) {
    const char *m = df_errmsg();
    FUZZ_ASSERT(*m);
    for (const unsigned char *p = (const unsigned char *)m; *p; p++) FUZZ_ASSERT(*p >= 0x20 && *p != 0x7f);
}

/* Splits data at its first NUL byte into two parts (the second empty when there is none). */
static inline void fuzz_split(const uint8_t *data, size_t size, const char **a, size_t *a_len, const char **b,
                              size_t *b_len) {
    const uint8_t *nul = memchr(data, 0, size);
    *a = (const char *)data, *a_len = nul ? (size_t)(nul - data) : size;
    *b = nul ? (const char *)nul + 1 : "", *b_len = nul ? size - *a_len - 1 : 0;
}

/* A scratch directory holding a synthetic K3-style tokenizer of n mergeable tokens with K3's
 * special spellings (made once per process, removed at exit). */
static char fuzz_tok_dir[512];

static inline void fuzz_tok_cleanup(void) {
    static const char *files[] = {"tiktoken.model", "tokenizer_config.json"};
    char path[600];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", fuzz_tok_dir, files[i]);
        unlink(path);
    }
    rmdir(fuzz_tok_dir);
}

static inline const char *fuzz_tokenizer_dir(int n_mergeable) {
    if (*fuzz_tok_dir) return fuzz_tok_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_tok_dir, sizeof fuzz_tok_dir, "%s/deltafin-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_tok_dir)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(fuzz_tok_cleanup);
    if (vocab_write_synthetic(fuzz_tok_dir, n_mergeable, 1)) {
        fprintf(stderr, "vocab_write_synthetic: %s\n", df_errmsg());
        exit(2);
    }
    return fuzz_tok_dir;
}

/* A synthetic tokenizer of n_mergeable tokens (256 bytes and the merges after them) with K3's
 * special spellings; exits when it cannot be made. One per process. */
static inline Tokenizer *fuzz_load_tokenizer_n(int n_mergeable) {
    Tokenizer *t = tok_load(fuzz_tokenizer_dir(n_mergeable));
    if (!t) {
        fprintf(stderr, "tok_load: %s\n", df_errmsg());
        exit(2);
    }
    return t;
}

/* The synthetic tokenizer (2,048 merges) most harnesses share. */
static inline Tokenizer *fuzz_load_tokenizer(void) { return fuzz_load_tokenizer_n(2048); }

#endif

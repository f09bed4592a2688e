/* tokenizer_fixture.h - scratch model directories for the tokenizer and chat-format tests: a
 * synthetic vocabulary of any size, or hand-written files. Directories live under $DF_TEST_TMP
 * (or /tmp) and are removed by fixture_cleanup. */
#ifndef DF_TOKENIZER_FIXTURE_H
#define DF_TOKENIZER_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "synth/vocab_synth.h"
#include "text/tokenizer.h"
#include "util/err.h"

#define FIXTURE_MAX_DIRS 64
static char fixture_dirs[FIXTURE_MAX_DIRS][256];
static int fixture_n;

static inline const char *fixture_dir(void) {
    const char *base = getenv("DF_TEST_TMP");
    if (fixture_n == FIXTURE_MAX_DIRS) {
        fprintf(stderr, "fixture: more than %d directories\n", FIXTURE_MAX_DIRS);
        exit(2);
    }
    char *d = fixture_dirs[fixture_n++];
    snprintf(d, 256, "%s/tok-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(d)) {
        perror("mkdtemp");
        exit(2);
    }
    return d;
}

static inline void fixture_write(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%.400s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(path);
        exit(2);
    }
}

/* A synthetic vocabulary with n mergeable tokens, loaded. Exits on failure. */
static inline Tokenizer *fixture_synth(int n, const char **dir_out) {
    const char *dir = fixture_dir();
    if (vocab_write_synthetic(dir, n, 1)) {
        fprintf(stderr, "vocab_write_synthetic: %s\n", df_errmsg());
        exit(2);
    }
    Tokenizer *t = tok_load(dir);
    if (!t) {
        fprintf(stderr, "tok_load: %s\n", df_errmsg());
        exit(2);
    }
    if (dir_out) *dir_out = dir;
    return t;
}

static inline void fixture_cleanup(void) {
    static const char *const names[] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < fixture_n; i++) {
        char path[512];
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%.255s/%s", fixture_dirs[i], names[k]);
            unlink(path);
        }
        rmdir(fixture_dirs[i]);
    }
}

/* Encodes a NUL-terminated string; the caller frees the ids. */
static inline TokIds fixture_encode(const Tokenizer *t, const char *s, int trusted) {
    TokIds ids = {0};
    if (tok_encode(t, s, strlen(s), trusted, &ids)) {
        fprintf(stderr, "tok_encode: %s\n", df_errmsg());
        exit(2);
    }
    return ids;
}

#endif

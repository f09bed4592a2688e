/* engine.h - what run, logits, nll (and later chat/serve) share: opening a checkpoint into a
 * ready model with its settings resolved from the environment, and printing them. */
#ifndef DF_ENGINE_H
#define DF_ENGINE_H

#include <stdio.h>

#include "format/catalog.h"
#include "model/model.h"
#include "store/mapped.h"
#include "text/tokenizer.h"

typedef struct {
    Catalog cat;
    MappedStore store;
    Pool *pool;
    Model *model;
    int threads;
    int max_context;
    ALogMode a_log;
} Engine;

/* dir NULL: $DELTAFIN_ROOT, else the current directory. Fails with a message. */
int engine_open(Engine *e, const char *dir);
void engine_close(Engine *e);
/* The one start-up line with every resolved setting. */
void engine_print_settings(const Engine *e, FILE *f);

/* Loads the checkpoint's tokenizer and checks it covers the model's vocabulary. */
Tokenizer *engine_tokenizer(const Engine *e);
/* Encodes untrusted text (special spellings are ordinary text). Returns the count or -1. */
int engine_encode_text(const Engine *e, const Tokenizer *tok, const char *text, size_t len, int **ids);

/* Parses whitespace-separated token ids (at most max). Returns the count, or -1 with a message. */
int parse_token_list(const char *text, int *ids, int max, int vocab);
/* Reads a file of whitespace-separated token ids into a new array. Returns the count or -1. */
int read_token_file(const char *path, int **ids, int vocab);

/* Feeds tokens through the model in chunks of `chunk` positions; writes logits of every
 * position to rows (if not NULL, [n][vocab]) or of the last position to last (if not NULL). */
int engine_prefill(Engine *e, State *st, const int *tokens, int n, int chunk, float *rows, float *last);

#endif

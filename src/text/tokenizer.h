/* tokenizer.h - K3's tiktoken tokenizer (docs/MODEL.md 6.1, 6.2): load, encode, decode.
 *
 * Vocabulary: ids 0..n_mergeable-1 are the byte strings of tiktoken.model (id = BPE rank);
 * the 256 ids after them are special tokens, spelled by tokenizer_config.json's
 * added_tokens_decoder or <|reserved_token_{id}|> by default. vocab size = n_mergeable + 256.
 *
 * Encoding input is UTF-8. Invalid input is not an error: every maximal ill-formed subpart is
 * replaced by U+FFFD first, so the ids are tiktoken's for the string Python's
 * bytes.decode("utf-8", "replace") (or a WHATWG TextDecoder) makes of the bytes. Special
 * spellings are recognised only in trusted text (chat structure); elsewhere they are ordinary
 * text. No BOS is added.
 *
 * A loaded Tokenizer is immutable: encode and decode may run on several threads at once. */
#ifndef DF_TOKENIZER_H
#define DF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokids.h"

#define TOK_N_SPECIAL 256

typedef struct Tokenizer Tokenizer;

/* Loads model_dir/tiktoken.model and model_dir/tokenizer_config.json. NULL with a message that
 * names the file and line or field on any problem. Free with tok_free. */
Tokenizer *tok_load(const char *model_dir);
/* tok_load, and the vocabulary must have exactly `vocab` ids (config.json's vocab_size). */
Tokenizer *tok_load_checked(const char *model_dir, int vocab);
/* The same from the two files' contents (labels name them in messages). */
Tokenizer *tok_parse(const char *ranks, size_t ranks_len, const char *ranks_label, const char *config,
                     size_t config_len, const char *config_label);
void tok_free(Tokenizer *t);

int tok_vocab_size(const Tokenizer *t);  /* n_mergeable + 256 */
int tok_n_mergeable(const Tokenizer *t); /* the first special id */

/* The id of a special token spelled exactly so, or -1. */
int32_t tok_special_id(const Tokenizer *t, const char *spelling);
/* 1 when id is one of the 256 special ids. */
int tok_is_special(const Tokenizer *t, int32_t id);

/* Appends the ids of text[0..len) to out. trusted: special spellings become special ids.
 * Returns 0, or -1 with a message (only on an internal regex failure). */
int tok_encode(const Tokenizer *t, const char *text, size_t len, int trusted, TokIds *out);

/* The raw bytes of one token (a special token's spelling), valid while t lives; NULL for an id
 * outside the vocabulary. */
const uint8_t *tok_token_bytes(const Tokenizer *t, int32_t id, size_t *len);

/* Decodes ids to text: token bytes concatenated, invalid UTF-8 replaced by U+FFFD (tiktoken's
 * decode with errors="replace"). Returns a NUL-terminated string the caller frees (*len
 * excludes the NUL), or NULL with a message naming the first id outside the vocabulary. */
char *tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len);

#endif

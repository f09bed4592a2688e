/* vocab_file.h - readers for the two tokenizer files of a K3 install (docs/MODEL.md 6.1), with
 * every rule checked and errors that name the file and the line or field:
 *   tiktoken.model        "<base64 bytes> <rank>" per line, ranks 0.. contiguous in line order,
 *                         no duplicate strings, every single byte present;
 *   tokenizer_config.json added_tokens_decoder {"<id>": {"content": "..."}} for special ids. */
#ifndef DF_VOCAB_FILE_H
#define DF_VOCAB_FILE_H

#include <stdint.h>

#include "text/rankmap.h"
#include "text/tokenizer.h"

#define VOCAB_MAX_FILE_BYTES (256u << 20)  /* tiktoken.model; K3's is about 2.5 MB */
#define VOCAB_MAX_TOKEN_BYTES 16384
#define VOCAB_MAX_CONFIG_BYTES (16u << 20) /* tokenizer_config.json */
#define VOCAB_MAX_SPECIAL_BYTES 256

/* The same from a buffer holding the file (`label` names it in messages); the readers below
 * read the file and call these. */
int vocab_parse_ranks(const char *text, size_t n, const char *label, RankMap *m, int32_t byte_rank[256]);
int vocab_parse_specials(const char *text, size_t n, const char *label, int32_t first_id, char *spell[TOK_N_SPECIAL]);

/* Reads tiktoken.model at path into m (freshly initialised by the caller) and fills
 * byte_rank[b] with the rank of each single byte. */
int vocab_read_ranks(const char *path, RankMap *m, int32_t byte_rank[256]);

/* Reads the spellings of special ids first_id .. first_id+255 from tokenizer_config.json at path
 * into spell[] (new strings the caller owns, also on failure, where unset entries are NULL). */
int vocab_read_specials(const char *path, int32_t first_id, char *spell[TOK_N_SPECIAL]);

#endif

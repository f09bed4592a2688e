/* vocab_write.h - writes a mergeable vocabulary as a K3 install's two tokenizer files
 * (docs/MODEL.md 6.1), the format vocab_file.h reads back:
 *   dir/tiktoken.model         "<base64 bytes> <rank>" per token, ranks 0..m->n-1 in order;
 *   dir/tokenizer_config.json  added_tokens_decoder for the 256 special ids m->n.., with K3's
 *                              spellings at K3's offsets (vocab_k3_special) and
 *                              <|reserved_token_{id}|> elsewhere, plus the named special tokens.
 * Both files are written atomically; the same map always gives byte-identical files. */
#ifndef DF_VOCAB_WRITE_H
#define DF_VOCAB_WRITE_H

#include "text/rankmap.h"

/* K3's spelling for special id first_special + offset (offset 0..255), e.g. offset 2 ->
 * "<|end_of_msg|>"; NULL where K3 leaves the default <|reserved_token_{id}|>. */
const char *vocab_k3_special(int offset);

/* Writes both files for m (which must start with the 256 single bytes, as rankmap_init_bytes
 * makes it). Returns 0, or -1 with a message naming the directory. */
int vocab_write_k3(const char *dir, const RankMap *m);

#endif

/* vocab_synth.h - a small but real K3-style vocabulary for synthetic checkpoints.
 *
 * vocab_write_synthetic writes dir/tiktoken.model and dir/tokenizer_config.json in K3's formats
 * (docs/MODEL.md 6.1; text/vocab_write.h). Ranks 0..255 are the single bytes in byte order; the next
 * ranks are merges learned by byte-level BPE (bpe_train.h) on the built-in English, source-code
 * and multilingual corpus (synth_corpus.h), so the tokenizer behaves like a trained one on
 * ordinary text. The corpus yields more than 8,192 tokens; a larger n_mergeable (the k3
 * preset's 163,584) is completed with compound tokens, each the concatenation of two learned
 * tokens in a fixed order, so every token is still the merge of two lower-ranked ones. The 256
 * special ids n_mergeable.. carry K3's spellings at K3's offsets and <|reserved_token_{id}|>
 * elsewhere.
 *
 * The files depend only on n_mergeable: the seed is accepted for symmetry with the weights and
 * is unused, so every seed gives byte-identical files. */
#ifndef DF_VOCAB_SYNTH_H
#define DF_VOCAB_SYNTH_H

#include <stdint.h>

#define VOCAB_SYNTH_MAX (1 << 22) /* largest n_mergeable accepted */

/* Returns 0, or -1 with a message (n_mergeable outside 256..VOCAB_SYNTH_MAX, write failure). */
int vocab_write_synthetic(const char *dir, int n_mergeable, uint64_t seed);

#endif

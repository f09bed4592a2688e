/* bpe_train.h - byte-level BPE training, the way tiktoken vocabularies are made: pre-tokenise
 * the documents with K3's regex, count distinct pieces, then repeatedly merge the most frequent
 * adjacent pair (ties: the pair of lower ids, left id first) into a new token. The result is
 * a pure function of the documents and the merge count. */
#ifndef DF_BPE_TRAIN_H
#define DF_BPE_TRAIN_H

#include "text/rankmap.h"

/* m holds exactly the 256 single bytes as ids 0..255 (id = byte value). Adds up to n_merges new
 * tokens learned from docs[0..n_docs) (valid UTF-8) and returns how many it added: fewer once
 * every piece of the documents is a single token. -1 with a message on a regex failure. */
int bpe_train(const char *const *docs, int n_docs, int n_merges, RankMap *m);

#endif

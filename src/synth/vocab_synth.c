#include "synth/vocab_synth.h"

#include <stdlib.h>
#include <string.h>

#include "synth/synth_corpus.h"
#include "text/bpe_train.h"
#include "text/rankmap.h"
#include "text/vocab_write.h"
#include "util/err.h"

/* Tops m up to n tokens with concatenations of two learned tokens (a outer, b inner). */
static int add_compounds(RankMap *m, uint32_t n) {
    uint32_t learned = m->n;
    uint8_t *cat = NULL;
    for (uint32_t a = 256; a < learned && m->n < n; a++)
        for (uint32_t b = 256; b < learned && m->n < n; b++) {
            size_t la, lb;
            const uint8_t *ba = rankmap_bytes(m, a, &la), *bb = rankmap_bytes(m, b, &lb);
            cat = df_realloc(cat, la + lb);
            memcpy(cat, ba, la), memcpy(cat + la, bb, lb);
            rankmap_add(m, cat, la + lb, NULL);
        }
    free(cat);
    if (m->n < n) return df_fail("synthetic vocabulary: cannot make %u tokens (at most %u)", n, m->n);
    return 0;
}

int vocab_write_synthetic(const char *dir, int n_mergeable, uint64_t seed) {
    (void)seed; /* see the header: the vocabulary does not depend on it */
    if (n_mergeable < 256 || n_mergeable > VOCAB_SYNTH_MAX)
        return df_fail("synthetic vocabulary: %d mergeable tokens requested; need 256..%d", n_mergeable,
                       VOCAB_SYNTH_MAX);
    RankMap m;
    rankmap_init_bytes(&m);
    int rc = bpe_train(SYNTH_CORPUS, SYNTH_CORPUS_DOCS, n_mergeable - 256, &m) < 0 ? -1 : 0;
    if (!rc) rc = add_compounds(&m, (uint32_t)n_mergeable);
    if (rc) rc = df_failctx("%s", dir);
    else rc = vocab_write_k3(dir, &m);
    rankmap_free(&m);
    return rc;
}

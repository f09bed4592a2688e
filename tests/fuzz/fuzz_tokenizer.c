/* The tokenizer on any text (K3-style synthetic vocabulary): encoding never fails, every id is
 * in the vocabulary, and decoding gives back the text with ill-formed UTF-8 replaced by U+FFFD
 * (tiktoken's behaviour), with and without special spellings recognised. */
#include "fuzz.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

static Tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tok = fuzz_load_tokenizer();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *want = malloc(utf8_sanitize(data, size, NULL) + 1);
    size_t want_len = utf8_sanitize(data, size, want);
    for (int trusted = 0; trusted <= 1; trusted++) {
        TokIds ids = {0};
        FUZZ_ASSERT(tok_encode(tok, (const char *)data, size, trusted, &ids) == 0);
        for (size_t i = 0; i < ids.n; i++) {
            FUZZ_ASSERT(ids.v[i] >= 0 && ids.v[i] < tok_vocab_size(tok));
            if (!trusted) FUZZ_ASSERT(!tok_is_special(tok, ids.v[i]));
        }
        size_t len;
        char *back = tok_decode(tok, ids.v, ids.n, &len);
        FUZZ_ASSERT(back && len == want_len && !memcmp(back, want, len));
        free(back);
        tokids_free(&ids);
    }
    free(want);
    return 0;
}

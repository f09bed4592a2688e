/* The two tokenizer files, tiktoken.model and tokenizer_config.json (the input holds both,
 * separated by its first NUL byte): a Tokenizer, or a message. An accepted vocabulary encodes
 * and decodes every one of its tokens' bytes. */
#include "fuzz.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *ranks, *config;
    size_t ranks_len, config_len;
    fuzz_split(data, size, &ranks, &ranks_len, &config, &config_len);
    Tokenizer *t = tok_parse(ranks, ranks_len, "tiktoken.model", config, config_len, "tokenizer_config.json");
    if (!t) {
        fuzz_check_message();
        return 0;
    }
    FUZZ_ASSERT(tok_n_mergeable(t) >= 256 && tok_vocab_size(t) == tok_n_mergeable(t) + TOK_N_SPECIAL);
    for (int32_t id = 0; id < tok_vocab_size(t) && id < 4096; id++) {
        size_t n;
        const uint8_t *b = tok_token_bytes(t, id, &n);
        FUZZ_ASSERT(b && n > 0);
    }
    const char sample[] = "Hello, world! 123 <|im_end|> \xe2\x82\xac";
    TokIds ids = {0};
    FUZZ_ASSERT(tok_encode(t, sample, sizeof sample - 1, 1, &ids) == 0);
    size_t len;
    char *back = tok_decode(t, ids.v, ids.n, &len);
    FUZZ_ASSERT(back && len == sizeof sample - 1 && !memcmp(back, sample, len));
    free(back);
    tokids_free(&ids);
    tok_free(t);
    return 0;
}

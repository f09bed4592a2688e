#include "text/vocab_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/base64.h"
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/fileio.h"

const char *vocab_k3_special(int offset) {
    switch (offset) {
    case 0: return "[BOS]";
    case 1: return "[EOS]";
    case 2: return "<|end_of_msg|>";
    case 3: return "<|open|>";
    case 4: return "<|close|>";
    case 5: return "<|sep|>";
    case 6: return "[start_header_id]";
    case 7: return "[end_header_id]";
    case 9: return "[EOT]";
    case 18: return "<|media_begin|>";
    case 19: return "<|media_content|>";
    case 20: return "<|media_end|>";
    case 21: return "<|media_pad|>";
    case 65: return "<osagent_mode>";
    case 254: return "[UNK]";
    case 255: return "[PAD]";
    default: return NULL;
    }
}

static int write_ranks(const char *dir, const RankMap *m) {
    size_t cap = 0;
    for (uint32_t i = 0; i < m->n; i++) cap += (m->off[i + 1] - m->off[i] + 2) / 3 * 4 + 13;
    char *text = df_malloc(cap + 1);
    size_t o = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        size_t len;
        const uint8_t *b = rankmap_bytes(m, i, &len);
        o += base64_encode(b, len, text + o);
        o += (size_t)sprintf(text + o, " %u\n", i);
    }
    char *path = path_join(dir, "tiktoken.model");
    int rc = file_write_atomic(path, text, o);
    free(path), free(text);
    return rc;
}

/* tokenizer_config.json in the shape of Hugging Face's: added_tokens_decoder plus the named
 * special tokens. */
static int write_config(const char *dir, uint32_t first) {
    json_t *dec = json_object();
    for (int i = 0; i < TOK_N_SPECIAL; i++) {
        char key[16], reserved[48];
        const char *content = vocab_k3_special(i);
        snprintf(key, sizeof key, "%u", first + (uint32_t)i);
        snprintf(reserved, sizeof reserved, "<|reserved_token_%u|>", first + (uint32_t)i);
        json_object_set_new(dec, key,
                            json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", content ? content : reserved,
                                      "lstrip", 0, "normalized", 0, "rstrip", 0, "single_word", 0, "special", 1));
    }
    json_t *root = json_pack("{s:o, s:s, s:s, s:s, s:s, s:i, s:s}", "added_tokens_decoder", dec, "bos_token",
                             "[BOS]", "eos_token", "<|end_of_msg|>", "pad_token", "[PAD]", "unk_token", "[UNK]",
                             "model_max_length", 1048576, "tokenizer_class", "TikTokenTokenizer");
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    char *path = path_join(dir, "tokenizer_config.json");
    size_t len = strlen(text);
    text = df_realloc(text, len + 2);
    text[len++] = '\n';
    int rc = file_write_atomic(path, text, len);
    free(path), free(text);
    return rc;
}

int vocab_write_k3(const char *dir, const RankMap *m) {
    int rc = write_ranks(dir, m);
    if (!rc) rc = write_config(dir, m->n);
    return rc ? df_failctx("%s", dir) : 0;
}

/* model.safetensors.index.json: a weight_map naming shards by safe plain file names (each entry
 * one of the distinct names, sorted and without repeats), or a message. */
#include "format/index.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ShardIndex ix;
    if (index_parse(&ix, (const char *)data, size, INDEX_FILE)) {
        fuzz_check_message();
        index_free(&ix);
        return 0;
    }
    FUZZ_ASSERT(ix.n_shards >= 1 && json_object_size(ix.weight_map) >= 1);
    for (int k = 0; k < ix.n_shards; k++) {
        FUZZ_ASSERT(index_shard_name_ok(ix.shards[k], strlen(ix.shards[k])));
        FUZZ_ASSERT(!strchr(ix.shards[k], '/') && !strchr(ix.shards[k], '\\'));
        FUZZ_ASSERT(k == 0 || strcmp(ix.shards[k - 1], ix.shards[k]) < 0);
    }
    const char *key;
    json_t *v;
    json_object_foreach(ix.weight_map, key, v) {
        int found = 0;
        for (int k = 0; k < ix.n_shards && !found; k++) found = !strcmp(ix.shards[k], json_string_value(v));
        FUZZ_ASSERT(found);
    }
    index_free(&ix);
    return 0;
}

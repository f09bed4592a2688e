/* model.safetensors.index.json: a weight_map naming the shards 1..N of N, or a message. */
#include "format/catalog.h"
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
        char want[64];
        int i, n;
        catalog_shard_name(want, sizeof want, k + 1, ix.n_shards);
        FUZZ_ASSERT(!strcmp(want, ix.shards[k]));
        FUZZ_ASSERT(index_shard_number(ix.shards[k], &i, &n) == 0 && i == k + 1 && n == ix.n_shards);
    }
    index_free(&ix);
    return 0;
}

/* A shard header's JSON (the bytes after the 8-byte length): parsed, or refused with a message.
 * An accepted header's tensors tile the data region exactly and fit their shapes. */
#include "format/safetensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    StHeader h;
    if (st_parse_header(&h, (const char *)data, size, 0, "fuzz.safetensors")) {
        fuzz_check_message();
        return 0;
    }
    FUZZ_ASSERT(h.data_start == 8 + size);
    uint64_t sum = 0;
    for (int i = 0; i < h.n; i++) {
        const TensorInfo *t = &h.t[i];
        uint64_t elems = 1;
        for (int d = 0; d < t->ndim; d++) elems *= (uint64_t)t->shape[d];
        FUZZ_ASSERT(t->nbytes == elems * dtype_size(t->dtype));
        FUZZ_ASSERT(t->offset >= h.data_start && t->offset + t->nbytes <= h.data_start + h.data_size);
        sum += t->nbytes;
    }
    FUZZ_ASSERT(sum == h.data_size);
    st_header_free(&h);
    return 0;
}

/* config.json: parsed into a validated K3Config, or refused with a message. */
#include "format/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    K3Config c;
    if (config_parse(&c, (const char *)data, size, "config.json")) {
        fuzz_check_message();
        return 0;
    }
    FUZZ_ASSERT(c.n_layers > 0 && c.n_kda_layers + c.n_mla_layers == c.n_layers);
    FUZZ_ASSERT(c.first_dense >= 0 && c.first_dense <= c.n_layers);
    FUZZ_ASSERT(c.top_k >= 1 && c.top_k <= c.n_experts);
    return 0;
}

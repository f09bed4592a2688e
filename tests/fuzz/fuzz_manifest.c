/* The install manifest (deltafin-manifest.txt, versions 1 and 2): parsed or refused with a
 * message naming the line. What is accepted survives the round trip: serialised and parsed
 * again it gives the same text, and its ranges are sorted, disjoint and inside each file. */
#include "fetch/manifest.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Manifest m;
    if (manifest_parse(&m, (const char *)data, size, MANIFEST_FILE)) {
        fuzz_check_message();
        manifest_free(&m);
        return 0;
    }
    for (int i = 0; i < m.n; i++) {
        const ManifestFile *f = &m.f[i];
        uint64_t sum = 0;
        for (int k = 0; k < f->n; k++) {
            FUZZ_ASSERT(f->r[k].begin < f->r[k].end && f->r[k].end <= f->size);
            if (k) FUZZ_ASSERT(f->r[k - 1].end < f->r[k].begin);
            sum += f->r[k].end - f->r[k].begin;
        }
        FUZZ_ASSERT(manifest_present_bytes(&m, i) == sum);
    }
    size_t len, len2;
    char *text = manifest_serialise(&m, &len);
    Manifest again;
    FUZZ_ASSERT(manifest_parse(&again, text, len, "round trip") == 0 && again.n == m.n);
    char *text2 = manifest_serialise(&again, &len2);
    FUZZ_ASSERT(len == len2 && !memcmp(text, text2, len));
    free(text), free(text2);
    manifest_free(&again);
    manifest_free(&m);
    return 0;
}

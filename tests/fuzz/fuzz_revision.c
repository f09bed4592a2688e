/* The answer of a source's revision API (GET /api/models/{repo}/revision/{rev}): parsed into a
 * commit and the files' sizes and published hashes, or refused with a message. */
#include "fetch/digest.h"
#include "fetch/revision.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    RevisionInfo ri;
    if (revision_parse(&ri, (const char *)data, size, "revision API")) {
        fuzz_check_message();
        revision_free(&ri);
        return 0;
    }
    FUZZ_ASSERT(is_hex_digest(ri.commit, 40));
    for (int i = 0; i < ri.n; i++) {
        FUZZ_ASSERT(revision_find(&ri, ri.f[i].name) == &ri.f[i]);
        if (i) FUZZ_ASSERT(strcmp(ri.f[i - 1].name, ri.f[i].name) < 0);
        char pub[80];
        revision_pub(&ri.f[i], pub);
        FUZZ_ASSERT(!*pub || !strncmp(pub, "sha256:", 7) || !strncmp(pub, "git-sha1:", 9));
    }
    revision_free(&ri);
    return 0;
}

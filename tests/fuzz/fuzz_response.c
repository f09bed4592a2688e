/* HTTP response headers as the fetcher receives them (one line per header, status lines of a
 * redirect chain included), then the range check an install applies: any header text gives a
 * consistent Response, and a range response is accepted only when it is exactly the bytes asked
 * for of the expected file. The first 16 bytes choose the request (offset, length). */
#include "fetch/response.h"
#include "fuzz.h"

static uint64_t take_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 16) return 0;
    uint64_t off = take_u64(data) % (1ull << 40), len = take_u64(data + 8) % (1ull << 32) + 1;
    data += 16, size -= 16;
    Response r;
    resp_begin(&r);
    for (size_t at = 0; at < size;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t n = nl ? (size_t)(nl - data - at) + 1 : size - at;
        resp_header(&r, (const char *)data + at, n);
        at += n;
    }
    FUZZ_ASSERT(r.status >= 0 && r.status < 1000 && r.retry_after >= 0 && r.retry_after <= 600);
    FUZZ_ASSERT(strlen(r.etag) < RESP_TAG_MAX && strlen(r.linked_etag) < RESP_TAG_MAX);
    FUZZ_ASSERT(!r.have_range || (r.range_first <= r.range_last && r.range_last < r.range_total));
    RemoteInfo info;
    resp_info(&r, &info);
    FUZZ_ASSERT(!*info.sha256 || strlen(info.sha256) == 64);
    FUZZ_ASSERT(!*info.commit || strlen(info.commit) == 40);
    char err[400];
    int transient;
    RemoteInfo expect = info;
    int ok = resp_check_range(&r, off, len, &expect, err, sizeof err, &transient) == 0;
    if (ok) {
        FUZZ_ASSERT(r.status == 206 && r.have_range && r.range_first == off && r.range_last == off + len - 1);
        FUZZ_ASSERT(!r.have_length || r.length == len);
    } else {
        FUZZ_ASSERT(*err);
        FUZZ_ASSERT(!(r.status == 200 && transient)); /* a server ignoring Range is never retried */
    }
    /* an accepted answer for another version of the file (identity, size, commit) is refused */
    RemoteInfo other = expect;
    other.identity[0] = 'x', other.identity[1] = 0;
    if (ok && strcmp(other.identity, expect.identity))
        FUZZ_ASSERT(resp_check_range(&r, off, len, &other, err, sizeof err, &transient) != 0 && !transient);
    other = expect, other.total = expect.total + 1;
    if (ok) FUZZ_ASSERT(resp_check_range(&r, off, len, &other, err, sizeof err, &transient) != 0 && !transient);
    return 0;
}

/* The installer's pure parts: SHA-256 against FIPS 180-4 test vectors and git's blob ids, the
 * range set the manifest keeps, the manifest's durable round trip (version 2, and version 1
 * read), what resets an entry, its refusal of malformed files, response headers and the checks
 * applied to them, the revision API's answer, and the validation of mirror settings. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "cli/settings.h"
#include "fetch/manifest.h"
#include "fetch/digest.h"
#include "fetch/response.h"
#include "fetch/revision.h"
#include "fetch/source.h"
#include "fetch/trace.h"
#include "util/err.h"
#include "util/fileio.h"

static void hex_of(const char *msg, size_t n, char out[65]) {
    Sha256 s;
    CHECK(sha256_init(&s) == 0);
    /* fed in odd pieces */
    for (size_t i = 0; i < n; i += 7) sha256_update(&s, msg + i, n - i < 7 ? n - i : 7);
    CHECK(sha256_final(&s, out) == 0);
}

static void test_sha256_vectors(void) {
    char h[65];
    hex_of("", 0, h);
    CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    hex_of("abc", 3, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), h);
    CHECK(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    hex_of(million, 1000000, h);
    CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(million);
    /* git's ids: `printf 'hello\n' | git hash-object --stdin`, and the empty blob */
    char g[41];
    CHECK(git_blob_sha1_hex("hello\n", 6, g) == 0);
    CHECK(!strcmp(g, "ce013625030ba8dba906f756967f9e9ca394464a"));
    CHECK(git_blob_sha1_hex("", 0, g) == 0);
    CHECK(!strcmp(g, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"));
}

static void test_ranges_merge(void) {
    Range *r = NULL;
    int n = 0, cap = 0;
    ranges_insert(&r, &n, &cap, 10, 20);
    ranges_insert(&r, &n, &cap, 30, 40);
    ranges_insert(&r, &n, &cap, 0, 5);
    CHECK(n == 3 && r[0].begin == 0 && r[1].begin == 10 && r[2].begin == 30);
    ranges_insert(&r, &n, &cap, 20, 30); /* touching both neighbours: one range 10-40 */
    CHECK(n == 2 && r[1].begin == 10 && r[1].end == 40);
    ranges_insert(&r, &n, &cap, 3, 50); /* swallows everything */
    CHECK(n == 1 && r[0].begin == 0 && r[0].end == 50);
    ranges_insert(&r, &n, &cap, 60, 60); /* empty: ignored */
    CHECK(n == 1);
    free(r);
}

static char dir[] = "/tmp/df-install-unit.XXXXXX";

static void test_manifest_roundtrip(void) {
    Manifest m;
    CHECK(manifest_load(&m, dir) == 0 && m.n == 0);
    int reset;
    ManifestFacts facts = {1000, 0, "", "v1-etag", 0};
    int a = manifest_entry(&m, "model-00001-of-000002.safetensors", &facts, &reset);
    manifest_add_written(&m, a, 100, 200);
    CHECK(!manifest_has_durable(&m, a, 100, 200)); /* written is usable, not yet recorded */
    CHECK(manifest_has(&m, a, 100, 200) && !manifest_has(&m, a, 100, 201));
    CHECK(manifest_present_bytes(&m, a) == 0);
    manifest_add_written(&m, a, 0, 100);
    manifest_add_written(&m, a, 500, 600);
    CHECK(manifest_commit(&m) == 0);
    CHECK(manifest_has_durable(&m, a, 0, 200) && manifest_has(&m, a, 150, 160) && !manifest_has(&m, a, 150, 250));
    CHECK(manifest_present_bytes(&m, a) == 300);
    Range *miss = NULL;
    int n = 0, cap = 0;
    manifest_missing(&m, a, 0, 1000, &miss, &n, &cap);
    CHECK(n == 2 && miss[0].begin == 200 && miss[0].end == 500 && miss[1].begin == 600 && miss[1].end == 1000);
    free(miss);
    manifest_free(&m);

    Manifest m2;
    CHECK(manifest_load(&m2, dir) == 0 && m2.n == 1);
    int b = manifest_find(&m2, "model-00001-of-000002.safetensors");
    CHECK(b == 0 && manifest_has(&m2, b, 0, 200) && manifest_has(&m2, b, 500, 600) && !manifest_has(&m2, b, 200, 201));
    CHECK(!strcmp(m2.f[b].identity, "v1-etag"));
    /* the same facts keep the ranges; unknown facts change nothing */
    ManifestFacts same = {1000, 0, "", "v1-etag", 0}, unknown = {1000, 0, "", "", 0};
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &same, &reset);
    CHECK(!reset && manifest_present_bytes(&m2, b) == 300);
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &unknown, &reset);
    CHECK(!reset && manifest_present_bytes(&m2, b) == 300);
    /* another mirror's ETag, adopted: recorded without dropping the bytes */
    ManifestFacts other = {1000, 0, "", "mirror2", 1};
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &other, &reset);
    CHECK(!reset && manifest_present_bytes(&m2, b) == 300 && !strcmp(m2.f[b].identity, "mirror2"));
    /* another version of the file (new ETag), or a new published hash: the old ranges are dropped */
    ManifestFacts newer = {1000, 0, "", "v2-etag", 0};
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &newer, &reset);
    CHECK(reset && manifest_present_bytes(&m2, b) == 0 && !strcmp(m2.f[b].identity, "v2-etag"));
    manifest_add_written(&m2, b, 0, 10);
    CHECK(manifest_commit(&m2) == 0);
    ManifestFacts hashed = {1000, 0, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "", 0};
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &hashed, &reset);
    ManifestFacts rehashed = {1000, 0, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "", 0};
    manifest_add_written(&m2, b, 0, 10);
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &rehashed, &reset);
    CHECK(reset && manifest_present_bytes(&m2, b) == 0 && !manifest_has(&m2, b, 0, 10)); /* written ranges too */
    /* a different size upstream: the old ranges are dropped */
    manifest_add_written(&m2, b, 0, 10);
    CHECK(manifest_commit(&m2) == 0);
    ManifestFacts bigger = {2000, 0, "", "", 0};
    manifest_entry(&m2, "model-00001-of-000002.safetensors", &bigger, &reset);
    CHECK(reset && manifest_present_bytes(&m2, b) == 0);
    manifest_set_revision(&m2, "https://h/o/n", "main", "0123456789abcdef0123456789abcdef01234567");
    CHECK(manifest_commit(&m2) == 0);
    manifest_free(&m2);
    Manifest m3;
    CHECK(manifest_load(&m3, dir) == 0 && m3.version == 2 && !strcmp(m3.revision, "main") &&
          !strcmp(m3.commit, "0123456789abcdef0123456789abcdef01234567") && !strcmp(m3.source, "https://h/o/n"));
    manifest_free(&m3);
}

static void test_manifest_version1(void) {
    const char *v1 = "deltafin-manifest 1\nsource https://h/o/n/resolve/main/\n"
                     "file model-00001-of-000001.safetensors 100 "
                     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad 0 1 1\n0 100\n"
                     "file config.json 5 - 1 0 1\n0 5\n";
    Manifest m;
    CHECK(manifest_parse(&m, v1, strlen(v1), "v1") == 0 && m.version == 1 && m.n == 2 && m.dirty);
    CHECK(!strcmp(m.f[0].pub, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") && m.f[0].verified);
    CHECK(!*m.f[1].pub && m.f[1].whole && manifest_present_bytes(&m, 1) == 5);
    size_t len;
    char *text = manifest_serialise(&m, &len);
    CHECK(!strncmp(text, "deltafin-manifest 2\n", 20));
    Manifest again;
    CHECK(manifest_parse(&again, text, len, "v2") == 0 && again.n == 2 && manifest_present_bytes(&again, 0) == 100);
    free(text);
    manifest_free(&again), manifest_free(&m);
}

static void test_manifest_rejects_malformed(void) {
    static const char *bad[] = {
        "deltafin-manifest 2\nfile a 100 0 1 - - 0 -\n-5 40\n",   /* a sign */
        "deltafin-manifest 2\nfile a 18446744073709551616 0 0 - - 0 -\n", /* overflow */
        "deltafin-manifest 2\nfile a 100 0 0 sha256:abc - 0 -\n",  /* not a hash */
        "deltafin-manifest 2\nfile a 100 0 0 - - 1 -\n",           /* verified without a hash */
        "deltafin-manifest 2\nfile a 100 0 0 - - 0 e\"t\n",        /* a quote in the identity */
        "deltafin-manifest 2\nrevision main 123\n",                /* not a commit */
        "deltafin-manifest 2\nfile a 100 0 0 - - 0 -\nfile a 100 0 0 - - 0 -\n", /* twice */
        "deltafin-manifest 2\nfile a 100  0 0 - - 0 -\n",          /* an empty field */
        "not a manifest\n",
        "deltafin-manifest 1\nfile a 100 - 0 0 1\n50 40\n",      /* empty range */
        "deltafin-manifest 1\nfile a 100 - 0 0 1\n0 200\n",      /* beyond the size */
        "deltafin-manifest 1\nfile a 100 - 0 0 2\n0 10\n",       /* truncated */
        "deltafin-manifest 1\nfile a 100 - 0 0 2\n20 30\n0 10\n", /* out of order */
        "deltafin-manifest 1\nfile ../x 100 - 0 0 0\n",          /* path outside the root */
        "deltafin-manifest 1\nfile a 100 abc 0 0 0\n",           /* not a hash */
    };
    char *path = path_join(dir, MANIFEST_FILE);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(file_write_atomic(path, bad[i], strlen(bad[i])) == 0);
        Manifest m;
        CHECK_MSG(manifest_load(&m, dir) != 0, "case %zu accepted", i);
        manifest_free(&m);
    }
    unlink(path);
    free(path);
}

static void test_source_validation(void) {
    int loop, http;
    CHECK(source_check_host("huggingface.co", &loop, &http) == 0 && !loop && !http);
    CHECK(source_check_host("http://127.0.0.1:8080", &loop, &http) == 0 && loop && http);
    CHECK(source_check_host("http://localhost:1", &loop, &http) == 0 && loop);
    CHECK(source_check_host("https://mirror.example.org/", &loop, &http) == 0);
    CHECK(source_check_host("http://example.com", &loop, &http) != 0);   /* plain http off loopback */
    CHECK(source_check_host("http://127.0.0.1.evil.com", &loop, &http) != 0);
    CHECK(source_check_host("host/../x", &loop, &http) != 0);
    CHECK(source_check_host("host:99999", &loop, &http) != 0);
    CHECK(source_check_host("host:", &loop, &http) != 0);
    CHECK(source_check_host("user@host", &loop, &http) != 0);
    CHECK(source_check_host("", &loop, &http) != 0);
    CHECK(source_check_path("moonshotai/Kimi-K3") == 0);
    CHECK(source_check_path("a/../b") != 0);
    CHECK(source_check_path("/a") != 0);
    CHECK(source_check_path("a//b") != 0);
    CHECK(source_check_path("a b") != 0);
    CHECK(source_check_path("a?x=1") != 0);
    Settings set;
    settings_defaults(&set);
    /* which parts of the source the settings name: an install follows its own for the others */
    const Setting *host = settings_find_flag("hf-host"), *rev = settings_find_flag("hf-revision");
    CHECK(set.engine.fetch.given == 0);
    CHECK(settings_set(&set, host, "http://127.0.0.1:9", "--hf-host") == 0 && set.engine.fetch.given == FETCH_GIVEN_HOST);
    CHECK(settings_set(&set, rev, "main", "--hf-revision") == 0 &&
          set.engine.fetch.given == (FETCH_GIVEN_HOST | FETCH_GIVEN_REVISION)); /* the default, named */
    CHECK(settings_set(&set, host, "", "--hf-host") == 0 && set.engine.fetch.given == FETCH_GIVEN_REVISION);
    settings_defaults(&set);
    CHECK(set.engine.fetch.given == 0);
    Source s;
    CHECK(source_init(&s, &set.engine.fetch) == 0);
    char *u = source_url(&s, "x");
    CHECK(!strcmp(u, "https://huggingface.co/moonshotai/Kimi-K3/resolve/main/x"));
    free(u);
    FetchOptions o = set.engine.fetch;
    o.host = "http://127.0.0.1:9", o.path = "org/model", o.revision = "v2", o.token = "abc";
    CHECK(source_init(&s, &o) == 0);
    u = source_url(&s, "config.json");
    CHECK(!strcmp(u, "http://127.0.0.1:9/org/model/resolve/v2/config.json"));
    CHECK(!strcmp(s.auth, "Authorization: Bearer abc"));
    free(u);
    o.token = "a b";
    CHECK(source_init(&s, &o) != 0 && strstr(df_errmsg(), "HF_TOKEN: "));
    o.token = NULL, o.revision = "a/b";
    CHECK(source_init(&s, &o) != 0 && strstr(df_errmsg(), "K3_HF_REVISION: "));
}

static int count_text(const char *text, uint64_t *counts, uint64_t *tokens) {
    char *path = path_join(dir, "trace.jsonl");
    int rc = file_write_atomic(path, text, strlen(text));
    K3Config c = {.n_layers = 4, .first_dense = 1, .n_experts = 8};
    memset(counts, 0, sizeof(uint64_t) * 32);
    if (!rc) rc = router_trace_count(path, &c, counts, tokens);
    unlink(path);
    free(path);
    return rc;
}

static void test_router_trace(void) {
    uint64_t counts[32], tokens;
    /* both spellings: a bare layer map, and store/trace.h's {"pos","layers"} */
    CHECK(count_text("{\"1\":[3,5],\"3\":[7]}\n\n{\"pos\":1,\"layers\":{\"1\":[3],\"2\":[0]}}\n", counts, &tokens) == 0);
    CHECK(tokens == 2 && counts[1 * 8 + 3] == 2 && counts[1 * 8 + 5] == 1 && counts[3 * 8 + 7] == 1 && counts[2 * 8 + 0] == 1);
    uint64_t sum = 0;
    for (int i = 0; i < 32; i++) sum += counts[i];
    CHECK(sum == 5);
    CHECK(count_text("{\"0\":[1]}\n", counts, &tokens) != 0);          /* dense layer */
    CHECK(count_text("{\"4\":[1]}\n", counts, &tokens) != 0);          /* past the last layer */
    CHECK(count_text("{\"1\":[8]}\n", counts, &tokens) != 0);          /* expert out of range */
    CHECK(count_text("{\"1\":[-1]}\n", counts, &tokens) != 0);
    CHECK(count_text("{\"1\":\"3\"}\n", counts, &tokens) != 0);        /* not a list */
    CHECK(count_text("{\"x\":[1]}\n", counts, &tokens) != 0);
    CHECK(count_text("[1,2]\n", counts, &tokens) != 0);
    CHECK(count_text("{\"layers\":[1]}\n", counts, &tokens) != 0);
    CHECK(strstr(df_errmsg(), ":1:") != NULL); /* names the line */
}

static void test_response_headers(void) {
    Response r;
    resp_begin(&r);
    const char *chain[] = {
        "HTTP/1.1 302 Found\r\n", "X-Linked-Etag: \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"\r\n",
        "X-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\n", "Location: /cdn/x\r\n", "\r\n",
        "HTTP/1.1 206 Partial Content\r\n", "Content-Range: bytes 10-19/100\r\n", "content-length: 10\r\n",
        "ETag: W/\"cdn-1\"\r\n", "\r\n"};
    for (size_t i = 0; i < sizeof chain / sizeof *chain; i++) resp_header(&r, chain[i], strlen(chain[i]));
    RemoteInfo info;
    resp_info(&r, &info);
    CHECK(r.status == 206 && r.n_status == 2 && info.total == 100 && !strcmp(r.etag, "W/cdn-1"));
    CHECK(!strcmp(info.identity, info.sha256) && !strcmp(info.commit, "0123456789abcdef0123456789abcdef01234567"));
    char err[300];
    int transient;
    CHECK(resp_check_range(&r, 10, 10, &info, err, sizeof err, &transient) == 0);
    CHECK(resp_check_range(&r, 10, 11, &info, err, sizeof err, &transient) != 0 && transient); /* another range */
    RemoteInfo other = info;
    snprintf(other.identity, sizeof other.identity, "%s", "somethingelse");
    CHECK(resp_check_range(&r, 10, 10, &other, err, sizeof err, &transient) != 0 && !transient);
    CHECK(strstr(err, "another version of this file") != NULL);
    other = info, other.total = 99;
    CHECK(resp_check_range(&r, 10, 10, &other, err, sizeof err, &transient) != 0 && !transient);
    other = info, other.commit[0] = 'f';
    CHECK(resp_check_range(&r, 10, 10, &other, err, sizeof err, &transient) != 0 && strstr(err, "commit") != NULL);
    /* a 200 to a range request is final; a 503 is worth a retry */
    resp_header(&r, "HTTP/1.1 200 OK", 15);
    CHECK(resp_check_range(&r, 10, 10, NULL, err, sizeof err, &transient) != 0 && !transient);
    resp_header(&r, "HTTP/1.1 503 Busy", 17);
    resp_header(&r, "Retry-After: 7", 14);
    CHECK(resp_check_range(&r, 10, 10, NULL, err, sizeof err, &transient) != 0 && transient && r.retry_after == 7);
    /* malformed values count as absent */
    resp_begin(&r);
    const char *bad[] = {"HTTP/1.1 206 x", "Content-Range: bytes 5-4/10", "Content-Length: -3", "ETag: noquotes",
                         "X-Repo-Commit: XYZ", "Retry-After: 99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) resp_header(&r, bad[i], strlen(bad[i]));
    resp_info(&r, &info);
    CHECK(!r.have_range && !r.have_length && !*r.etag && !*r.commit && !r.retry_after && !*info.identity);
}

static void test_revision_api(void) {
    const char *ok = "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":["
                     "{\"rfilename\":\"config.json\",\"size\":5,\"blobId\":\"ce013625030ba8dba906f756967f9e9ca394464a\"},"
                     "{\"rfilename\":\"model-00001-of-000001.safetensors\",\"size\":9,\"lfs\":{\"sha256\":"
                     "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\",\"size\":9}},"
                     "{\"rfilename\":\"sub/dir.txt\"}]}";
    RevisionInfo ri;
    CHECK(revision_parse(&ri, ok, strlen(ok), "api") == 0 && ri.n == 2);
    char pub[80];
    const RevisionFile *f = revision_find(&ri, "config.json");
    CHECK(f && f->size == 5);
    revision_pub(f, pub);
    CHECK(!strcmp(pub, "git-sha1:ce013625030ba8dba906f756967f9e9ca394464a"));
    revision_pub(revision_find(&ri, "model-00001-of-000001.safetensors"), pub);
    CHECK(!strncmp(pub, "sha256:ba78", 11) && !revision_find(&ri, "sub/dir.txt"));
    revision_free(&ri);
    const char *bad[] = {"[]", "{\"sha\":\"abc\",\"siblings\":[]}",
                         "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\"}",
                         "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\",\"size\":-1}]}",
                         "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":[{\"rfilename\":\"a\"},{\"rfilename\":\"a\"}]}",
                         "<html>not found</html>"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(revision_parse(&ri, bad[i], strlen(bad[i]), "api") != 0, "case %zu accepted", i);
        revision_free(&ri);
    }
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_sha256_vectors);
    RUN(test_ranges_merge);
    RUN(test_manifest_roundtrip);
    RUN(test_manifest_version1);
    RUN(test_manifest_rejects_malformed);
    RUN(test_response_headers);
    RUN(test_revision_api);
    RUN(test_source_validation);
    RUN(test_router_trace);
    char *p = path_join(dir, MANIFEST_FILE);
    unlink(p);
    free(p);
    rmdir(dir);
    return check_summary();
}

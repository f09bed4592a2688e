/* The streaming store's building blocks: cache eviction policies (LRU order, LFU keeps what is
 * used often, locked slots are never evicted), shard reads at unaligned offsets in O_DIRECT and
 * buffered mode, and read failures naming the file and byte range. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "store/budget.h"
#include "store/cache_index.h"
#include "store/shardio.h"
#include "util/err.h"

static void fill(CacheIndex *ci, int n) {
    for (int k = 0; k < n; k++) {
        int s = cidx_victim(ci);
        cidx_assign(ci, s, k);
        cidx_use(ci, k, s);
    }
}

static void lru_evicts_least_recent(void) {
    CacheIndex ci;
    cidx_init(&ci, POLICY_LRU, 4, 100);
    CHECK(cidx_victim(&ci) >= 0 && ci.key_of_slot[cidx_victim(&ci)] == -1);
    fill(&ci, 4);                       /* keys 0..3, used in that order */
    cidx_use(&ci, 0, cidx_lookup(&ci, 0)); /* 0 becomes the most recent */
    CHECK(ci.key_of_slot[cidx_victim(&ci)] == 1);
    ci.locked[cidx_lookup(&ci, 1)] = 1;
    CHECK(ci.key_of_slot[cidx_victim(&ci)] == 2);
    int s = cidx_victim(&ci);
    cidx_assign(&ci, s, 50);
    CHECK(cidx_lookup(&ci, 2) == -1 && cidx_lookup(&ci, 50) == s);
    for (int i = 0; i < 4; i++) ci.locked[i] = 1;
    CHECK(cidx_victim(&ci) == -1);
    cidx_free(&ci);
}

static void lfu_keeps_frequent(void) {
    CacheIndex lfu, lru;
    cidx_init(&lfu, POLICY_LFU, 3, 100);
    cidx_init(&lru, POLICY_LRU, 3, 100);
    CacheIndex *both[2] = {&lfu, &lru};
    for (int c = 0; c < 2; c++) {
        fill(both[c], 3);
        for (int r = 0; r < 5; r++) cidx_use(both[c], 0, cidx_lookup(both[c], 0)); /* key 0 is hot */
        cidx_use(both[c], 1, cidx_lookup(both[c], 1));
        cidx_use(both[c], 2, cidx_lookup(both[c], 2)); /* 0 is now the least recent */
    }
    CHECK(lru.key_of_slot[cidx_victim(&lru)] == 0);
    CHECK(lfu.key_of_slot[cidx_victim(&lfu)] != 0);
    cidx_free(&lfu), cidx_free(&lru);
}

static void policy_names(void) {
    CHECK(!strcmp(cache_policy_name(POLICY_LFU), "lfu") && !strcmp(cache_policy_name(POLICY_LRU), "lru"));
}

static void budget_fixed_or_measured(void) {
    uint64_t b;
    char how[160];
    CHECK(budget_detect(12500000000ull, &b, how, sizeof how) == 0 && b == 12500000000ull && strstr(how, "K3_RAM_GB"));
    CHECK(budget_detect(0, &b, how, sizeof how) == 0 && b > 0);
    uint64_t avail = budget_mem_available(), cg = budget_cgroup_limit();
    CHECK(avail > 0);
    CHECK(b < avail || (cg && b < cg));
}

/* A file of n bytes where byte i = (i * 7 + i / 4096) & 255. */
static char *make_file(size_t n) {
    static char path[] = "/tmp/df-shardio-XXXXXX";
    int fd = mkstemp(path);
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)((i * 7 + i / 4096) & 255);
    CHECK(fd >= 0 && write(fd, buf, n) == (ssize_t)n);
    close(fd);
    free(buf);
    return path;
}

static int byte_ok(const uint8_t *p, uint64_t off, uint64_t len) {
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(((off + i) * 7 + (off + i) / 4096) & 255)) return 0;
    return 1;
}

static void shard_reads(void) {
    const size_t N = 3 * 1024 * 1024 + 123;
    char *path = make_file(N);
    for (int direct = 0; direct < 2; direct++) {
        Shards s = {0};
        s.n = 1;
        int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
        if (fd < 0) fd = open(path, O_RDONLY), direct = 0; /* a file system without O_DIRECT */
        s.fd = &fd;
        s.path = &path;
        s.direct = direct;
        uint64_t cases[][2] = {{0, 10}, {1, 4095}, {4095, 2}, {5000, 1000000}, {N - 17, 17}, {N - 5000, 5000}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            uint64_t off = cases[c][0], len = cases[c][1];
            uint8_t *buf = df_aligned_alloc(SHARD_ALIGN, shard_read_cap(off, len));
            CHECK_MSG(shard_read(&s, 0, off, len, buf, "test") == 0, "%s", df_errmsg());
            CHECK_MSG(byte_ok(buf + off % SHARD_ALIGN, off, len), "direct %d, bytes %llu+%llu", direct,
                      (unsigned long long)off, (unsigned long long)len);
            free(buf);
        }
        /* past the end: an error naming the file, the range and the size */
        uint8_t *buf = df_aligned_alloc(SHARD_ALIGN, shard_read_cap(N - 10, 100));
        CHECK(shard_read(&s, 0, N - 10, 100, buf, "layer 3 expert 5") == -1);
        CHECK_MSG(strstr(df_errmsg(), path) && strstr(df_errmsg(), "layer 3 expert 5") && strstr(df_errmsg(), "truncated to"),
                  "%s", df_errmsg());
        free(buf);
        close(fd);
    }
    /* deleted while open: refused (the bytes may be stale) */
    int fd = open(path, O_RDONLY);
    Shards s = {1, &fd, &path, 0, 0};
    unlink(path);
    uint8_t *buf = df_aligned_alloc(SHARD_ALIGN, SHARD_ALIGN * 2);
    CHECK(shard_read(&s, 0, 10, 100, buf, "spine") == -1 && strstr(df_errmsg(), "deleted"));
    free(buf);
    close(fd);
}

int main(void) {
    RUN(lru_evicts_least_recent);
    RUN(lfu_keeps_frequent);
    RUN(policy_names);
    RUN(budget_fixed_or_measured);
    RUN(shard_reads);
    return check_summary();
}

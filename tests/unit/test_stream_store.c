/* The streaming store's building blocks: cache eviction policies (LRU order, LFU keeps what is
 * used often, CRF's decayed counts against a direct computation, locked slots are never evicted,
 * emptied slots are taken first), shard reads at unaligned offsets in O_DIRECT and
 * buffered mode, and read failures naming the file and byte range. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "store/budget.h"
#include "model/cache_index.h"
#include "store/shardio.h"
#include "util/err.h"
#include "util/platform.h"

static void fill(CacheIndex *ci, int n) {
    for (int k = 0; k < n; k++) {
        int s = cidx_victim(ci, -1);
        cidx_assign(ci, s, k);
        cidx_use(ci, k, s);
    }
}

static void lru_evicts_least_recent(void) {
    CacheIndex ci;
    cidx_init(&ci, POLICY_LRU, 4, 1, 100);
    CHECK(cidx_victim(&ci, -1) >= 0 && ci.key_of_slot[cidx_victim(&ci, -1)] == -1);
    fill(&ci, 4);                       /* keys 0..3, used in that order */
    cidx_use(&ci, 0, cidx_lookup(&ci, 0)); /* 0 becomes the most recent */
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 1);
    cidx_lock(&ci, cidx_lookup(&ci, 1), 1);
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 2);
    int s = cidx_victim(&ci, -1);
    cidx_assign(&ci, s, 50);
    CHECK(cidx_lookup(&ci, 2) == -1 && cidx_lookup(&ci, 50) == s);
    for (int i = 0; i < 4; i++) cidx_lock(&ci, i, 1);
    CHECK(cidx_victim(&ci, -1) == -1);
    cidx_lock(&ci, cidx_lookup(&ci, 1), 0);
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 1);
    cidx_free(&ci);
}

/* An expert used in each of the last few passes outranks one used once; one used often long
 * ago fades below a fresh one. */
static void crf_weighs_recency_and_frequency(void) {
    CacheIndex ci;
    cidx_init(&ci, POLICY_CRF, 3, 1, 100);
    fill(&ci, 3);                       /* keys 0, 1, 2: one use each, in pass 0 */
    for (int p = 0; p < 4; p++) cidx_next_pass(&ci), cidx_use(&ci, 0, cidx_lookup(&ci, 0));
    cidx_use(&ci, 2, cidx_lookup(&ci, 2));
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 1); /* once, long ago */
    int s = cidx_victim(&ci, -1);
    cidx_assign(&ci, s, 3), cidx_use(&ci, 3, s);
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 3); /* one use now goes before 2's two uses */
    for (int p = 0; p < 40; p++) cidx_next_pass(&ci);
    cidx_use(&ci, 3, cidx_lookup(&ci, 3));
    cidx_use(&ci, 2, cidx_lookup(&ci, 2));
    CHECK(ci.key_of_slot[cidx_victim(&ci, -1)] == 0); /* 5 uses 40 passes ago < 1 use now */
    cidx_free(&ci);
}

/* Random uses, passes, locks and refills over 4 layers, the pass at a random layer: the victim
 * is always the unlocked slot whose key has the smallest count, decayed by 2^(-1/half_life) per
 * pass and by 2^(-phase * d) for its layer's distance d from the pass, computed here directly. */
static void crf_victim_matches_direct_counts(void) {
    enum { SLOTS = 24, LAYERS = 4, EXPERTS = 15, KEYS = LAYERS * EXPERTS };
    CacheIndex ci;
    cidx_init(&ci, POLICY_CRF, SLOTS, LAYERS, EXPERTS);
    double count[KEYS] = {0}, decay = exp2(-1.0 / ci.half_life);
    uint64_t rng = 12345;
    int bad = 0, now = 0;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int r = (int)(rng >> 33), key = r % KEYS;
        if (r % 7 == 0) {
            cidx_next_pass(&ci);
            for (int k = 0; k < KEYS; k++) count[k] *= decay;
        } else if (r % 11 == 0) {
            int s = (r / 11) % SLOTS;
            cidx_lock(&ci, s, !ci.locked[s]);
        } else if (r % 13 == 0) {
            now = (r / 13) % (LAYERS + 1) - 1; /* -1: no layer */
        } else {
            int s = cidx_lookup(&ci, key);
            if (s < 0 && (s = cidx_victim(&ci, now)) >= 0) cidx_assign(&ci, s, key);
            cidx_use(&ci, key, s);
            count[key] += 1;
        }
        int v = cidx_victim(&ci, now), best = -1;
        double cb = 0, cv = -2;
        for (int s = 0; s < SLOTS; s++) { /* smallest adjusted count (empty: -1); ties: least recent */
            if (ci.locked[s]) continue;
            int k = ci.key_of_slot[s], l = k / EXPERTS, d = ((l - now - 1) % LAYERS + LAYERS) % LAYERS + 1;
            double c = k < 0 ? -1 : now < 0 ? count[k] : count[k] * exp2(-ci.phase * ((double)d / LAYERS + (l == now)));
            if (best < 0 || c < cb - 1e-9 || (fabs(c - cb) <= 1e-9 && ci.last_use[s] < ci.last_use[best])) best = s, cb = c;
            if (s == v) cv = c;
        }
        if ((v < 0) != (best < 0) || fabs(cv - cb) > 1e-9) bad++;
    }
    CHECK(ci.phase > 0 && bad == 0);
    cidx_free(&ci);
}

static void lfu_keeps_frequent(void) {
    CacheIndex lfu, lru;
    cidx_init(&lfu, POLICY_LFU, 3, 1, 100);
    cidx_init(&lru, POLICY_LRU, 3, 1, 100);
    CacheIndex *both[2] = {&lfu, &lru};
    for (int c = 0; c < 2; c++) {
        fill(both[c], 3);
        for (int r = 0; r < 5; r++) cidx_use(both[c], 0, cidx_lookup(both[c], 0)); /* key 0 is hot */
        cidx_use(both[c], 1, cidx_lookup(both[c], 1));
        cidx_use(both[c], 2, cidx_lookup(both[c], 2)); /* 0 is now the least recent */
    }
    CHECK(lru.key_of_slot[cidx_victim(&lru, -1)] == 0);
    CHECK(lfu.key_of_slot[cidx_victim(&lfu, -1)] != 0);
    cidx_free(&lfu), cidx_free(&lru);
}

/* A slot emptied after use (the store empties one whose read failed) is taken before anything is
 * evicted, under every policy, however recently or often its old key was used. */
static void emptied_slots_come_first(void) {
    const CachePolicy policies[] = {POLICY_LRU, POLICY_LFU, POLICY_CRF};
    for (int p = 0; p < 3; p++) {
        CacheIndex ci;
        cidx_init(&ci, policies[p], 4, 1, 100);
        fill(&ci, 4);
        for (int r = 0; r < 3; r++) cidx_use(&ci, 3, cidx_lookup(&ci, 3)); /* key 3: most recent, most used */
        int s = cidx_lookup(&ci, 3);
        cidx_assign(&ci, s, -1);
        CHECK_MSG(cidx_victim(&ci, -1) == s, "%s: slot %d is empty, yet slot %d was chosen", cache_policy_name(ci.policy),
                  s, cidx_victim(&ci, -1));
        cidx_free(&ci);
    }
}

static void policy_names(void) {
    CHECK(!strcmp(cache_policy_name(POLICY_LFU), "lfu") && !strcmp(cache_policy_name(POLICY_LRU), "lru") &&
          !strcmp(cache_policy_name(POLICY_CRF), "crf"));
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
    for (int mode = 0; mode < 2; mode++) { /* buffered, then uncached (O_DIRECT, F_NOCACHE on macOS) */
        Shards s = {0};
        s.n = 1;
        int direct = mode, fd = direct ? plat_open_uncached(path, O_RDONLY, 0) : open(path, O_RDONLY);
        if (fd < 0 && direct) fd = open(path, O_RDONLY), direct = 0; /* a file system without O_DIRECT */
        CHECK_MSG(fd >= 0, "%s: %s", path, strerror(errno));
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
    RUN(crf_weighs_recency_and_frequency);
    RUN(crf_victim_matches_direct_counts);
    RUN(emptied_slots_come_first);
    RUN(policy_names);
    RUN(budget_fixed_or_measured);
    RUN(shard_reads);
    return check_summary();
}

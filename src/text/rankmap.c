#include "text/rankmap.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* Word-at-a-time mixing with a murmur-style finaliser: tokens are short, so the per-byte loop
 * of FNV would dominate BPE time. */
static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8, n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    return h;
}

void rankmap_init(RankMap *m) {
    memset(m, 0, sizeof *m);
    m->cap_ids = 256;
    m->off = df_malloc((m->cap_ids + 1) * sizeof *m->off);
    m->off[0] = 0;
    m->cap_bytes = 4096;
    m->bytes = df_malloc(m->cap_bytes);
    m->mask = 1023;
    m->slots = df_calloc(m->mask + 1, sizeof *m->slots);
}

void rankmap_init_bytes(RankMap *m) {
    rankmap_init(m);
    for (int b = 0; b < 256; b++) rankmap_add(m, &(uint8_t){(uint8_t)b}, 1, NULL);
}

void rankmap_free(RankMap *m) {
    free(m->bytes), free(m->off), free(m->slots);
    memset(m, 0, sizeof *m);
}

static int same(const RankMap *m, uint32_t id, const uint8_t *s, size_t len) {
    size_t l;
    const uint8_t *b = rankmap_bytes(m, id, &l);
    return l == len && memcmp(b, s, len) == 0;
}

int32_t rankmap_get(const RankMap *m, const uint8_t *s, size_t len) {
    for (uint32_t i = (uint32_t)hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        if (same(m, v - 1, s, len)) return (int32_t)(v - 1);
    }
}

static void insert_slot(RankMap *m, uint32_t id) {
    size_t len;
    const uint8_t *s = rankmap_bytes(m, id, &len);
    uint32_t i = (uint32_t)hash_bytes(s, len) & m->mask;
    while (m->slots[i]) i = (i + 1) & m->mask;
    m->slots[i] = id + 1;
}

/* Keeps the table at most half full so probes stay short. */
static void grow_table(RankMap *m) {
    free(m->slots);
    m->mask = m->mask * 2 + 1;
    m->slots = df_calloc((size_t)m->mask + 1, sizeof *m->slots);
    for (uint32_t id = 0; id < m->n; id++) insert_slot(m, id);
}

int32_t rankmap_add(RankMap *m, const uint8_t *s, size_t len, int32_t *dup_id) {
    int32_t old = rankmap_get(m, s, len);
    if (old >= 0) {
        if (dup_id) *dup_id = old;
        return -1;
    }
    if (m->n + 1 >= m->cap_ids) {
        m->cap_ids *= 2;
        m->off = df_realloc(m->off, ((size_t)m->cap_ids + 1) * sizeof *m->off);
    }
    size_t used = m->off[m->n];
    if (used + len > m->cap_bytes) {
        while (used + len > m->cap_bytes) m->cap_bytes *= 2;
        m->bytes = df_realloc(m->bytes, m->cap_bytes);
    }
    memcpy(m->bytes + used, s, len);
    m->off[m->n + 1] = (uint32_t)(used + len);
    uint32_t id = m->n++;
    if ((size_t)m->n * 2 > (size_t)m->mask + 1) grow_table(m);
    else insert_slot(m, id);
    return (int32_t)id;
}

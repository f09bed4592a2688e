/* rankmap.h - the mergeable vocabulary: byte strings numbered 0..n-1 (the id is the BPE rank),
 * with O(1) lookup from bytes to rank. Strings live in one growing arena; an open-addressing
 * table of ids indexes them. The map owns all its memory; pointers returned by rankmap_bytes
 * stay valid until the next rankmap_add or rankmap_free. Lookups never allocate and may run
 * concurrently once building is over. */
#ifndef DF_RANKMAP_H
#define DF_RANKMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *bytes;   /* token i is bytes[off[i] .. off[i+1]) */
    uint32_t *off;    /* n + 1 entries */
    uint32_t n, cap_ids;
    size_t cap_bytes;
    uint32_t *slots;  /* id + 1 per slot, 0 = empty; size mask + 1, a power of two */
    uint32_t mask;
} RankMap;

void rankmap_init(RankMap *m);
/* rankmap_init, then the 256 single bytes as ids 0..255 (id = byte value): where byte-level
 * BPE vocabularies start. */
void rankmap_init_bytes(RankMap *m);
void rankmap_free(RankMap *m);

/* Adds s[0..len) (len >= 1) with id m->n and returns that id, or returns -1 when the string is
 * already present (*dup_id = its id). Capacity: fewer than 2^31 ids and 4 GiB of bytes. */
int32_t rankmap_add(RankMap *m, const uint8_t *s, size_t len, int32_t *dup_id);

/* The rank of s[0..len), or -1. */
int32_t rankmap_get(const RankMap *m, const uint8_t *s, size_t len);

static inline const uint8_t *rankmap_bytes(const RankMap *m, uint32_t id, size_t *len) {
    *len = m->off[id + 1] - m->off[id];
    return m->bytes + m->off[id];
}

#endif

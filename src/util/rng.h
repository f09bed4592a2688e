/* rng.h - a small deterministic PRNG (xoshiro256** seeded through splitmix64) for synthetic
 * checkpoints and tests. Same seed, same stream, on every machine. Not for anything secret. */
#ifndef DF_RNG_H
#define DF_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void rng_seed(Rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rng_next(Rng *r) {
    uint64_t *s = r->s, x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [-1, 1) with 24 bits of resolution. */
static inline float rng_sym(Rng *r) { return (float)(int32_t)(rng_next(r) >> 32) * (1.0f / 2147483648.0f); }

/* FNV-1a of a string, to derive independent per-tensor streams from one seed. */
static inline uint64_t rng_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

#endif

/* sha256.h - SHA-256 (FIPS 180-4), incremental, for verifying downloaded files against the hash a
 * server publishes. No allocation; the context is plain data the caller owns. */
#ifndef DF_SHA256_H
#define DF_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t total;      /* bytes hashed so far */
    uint8_t block[64];
    size_t used;         /* bytes waiting in block */
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
/* Writes the 32-byte digest. The context must be re-initialised before reuse. */
void sha256_final(Sha256 *s, uint8_t out[32]);
/* Digest as 64 lowercase hex characters plus NUL. */
void sha256_hex(const uint8_t digest[32], char out[65]);
/* Hashes bytes [0, size) of an open file with positional reads; hex digest into out. */
int sha256_file(int fd, uint64_t size, char out[65], const char *label);

#endif

/* digest.h - the hashes an install is checked with, computed by OpenSSL's libcrypto (which uses
 * the CPU's SHA instructions where it has them):
 *   SHA-256 of a whole file: what Hugging Face publishes for large (LFS) files, and what the
 *     installer records for every file it completes, so later checks can tell local damage;
 *   the git blob SHA-1 (SHA-1 of "blob <size>\0" + content): Hugging Face's id of small files.
 * A context is owned by its caller; *_final or sha256_abort releases it. libcrypto failing (it
 * cannot allocate) is an error like any other: init and final return -1 with a message, and an
 * update that failed makes final fail. */
#ifndef DF_DIGEST_H
#define DF_DIGEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    void *ctx;       /* EVP_MD_CTX */
    uint64_t total;  /* bytes hashed so far */
    int failed;
} Sha256;

int sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
/* The digest as 64 lowercase hex characters plus NUL; releases the context. */
int sha256_final(Sha256 *s, char hex[65]);
void sha256_abort(Sha256 *s);
int sha256_hex_of(const void *data, size_t n, char hex[65]);

/* The git blob SHA-1 of a file of `size` bytes, fed in pieces. */
typedef struct {
    void *ctx;
    uint64_t total;
    int failed;
} GitSha1;
int git_sha1_init(GitSha1 *g, uint64_t size);
void git_sha1_update(GitSha1 *g, const void *data, size_t n);
int git_sha1_final(GitSha1 *g, char hex[41]);
int git_blob_sha1_hex(const void *data, size_t n, char hex[41]);

/* 1 when s is exactly n lowercase hex digits. */
int is_hex_digest(const char *s, size_t n);

#endif

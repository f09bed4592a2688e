#include "fetch/digest.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static void to_hex(const unsigned char *d, unsigned n, char *hex) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) hex[2 * i] = digits[d[i] >> 4], hex[2 * i + 1] = digits[d[i] & 15];
    hex[2 * n] = 0;
}

static void *new_ctx(const EVP_MD *md, const char *what) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (c && EVP_DigestInit_ex(c, md, NULL) == 1) return c;
    EVP_MD_CTX_free(c);
    df_fail("libcrypto: cannot start %s (out of memory?)", what);
    return NULL;
}

/* Finishes ctx into hex (n_bytes of digest expected) and frees it. */
static int finish(void **ctx, int failed, unsigned n_bytes, char *hex, const char *what) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    int ok = !failed && EVP_DigestFinal_ex(*ctx, d, &n) == 1 && n == n_bytes;
    EVP_MD_CTX_free(*ctx);
    *ctx = NULL;
    if (!ok) return df_fail("libcrypto: %s failed", what);
    to_hex(d, n, hex);
    return 0;
}

int sha256_init(Sha256 *s) {
    s->total = 0, s->failed = 0;
    s->ctx = new_ctx(EVP_sha256(), "SHA-256");
    return s->ctx ? 0 : -1;
}

void sha256_update(Sha256 *s, const void *data, size_t n) {
    if (n && EVP_DigestUpdate(s->ctx, data, n) != 1) s->failed = 1;
    s->total += n;
}

int sha256_final(Sha256 *s, char hex[65]) { return finish(&s->ctx, s->failed, 32, hex, "SHA-256"); }

void sha256_abort(Sha256 *s) {
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}

int sha256_hex_of(const void *data, size_t n, char hex[65]) {
    Sha256 s;
    if (sha256_init(&s)) return -1;
    sha256_update(&s, data, n);
    return sha256_final(&s, hex);
}

int git_sha1_init(GitSha1 *g, uint64_t size) {
    char head[40];
    int hn = snprintf(head, sizeof head, "blob %llu", (unsigned long long)size) + 1; /* the NUL belongs to it */
    g->total = 0, g->failed = 0;
    g->ctx = new_ctx(EVP_sha1(), "SHA-1");
    if (!g->ctx) return -1;
    if (EVP_DigestUpdate(g->ctx, head, (size_t)hn) != 1) g->failed = 1;
    return 0;
}

void git_sha1_update(GitSha1 *g, const void *data, size_t n) {
    if (n && EVP_DigestUpdate(g->ctx, data, n) != 1) g->failed = 1;
    g->total += n;
}

int git_sha1_final(GitSha1 *g, char hex[41]) { return finish(&g->ctx, g->failed, 20, hex, "SHA-1"); }

int git_blob_sha1_hex(const void *data, size_t n, char hex[41]) {
    GitSha1 g;
    if (git_sha1_init(&g, n)) return -1;
    git_sha1_update(&g, data, n);
    return git_sha1_final(&g, hex);
}

int is_hex_digest(const char *s, size_t n) {
    size_t i = 0;
    for (; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[i] == 0;
}

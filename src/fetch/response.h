/* response.h - what an HTTP response chain (redirects included) says about the file it serves,
 * parsed from raw header lines, and the checks an install applies to it. Header values are
 * hostile: each is bounded and validated, anything malformed counts as absent. Pure functions on
 * plain data (no I/O), so they can be fuzzed on their own (tests/fuzz/fuzz_response.c).
 *
 * A file's identity is what tells one version of its bytes from another: Hugging Face's
 * X-Linked-ETag (the SHA-256 of an LFS file, sent on the hub's answer even when it redirects to a
 * CDN), else the ETag of the response that carried the bytes. X-Repo-Commit names the commit the
 * hub resolved the request against. */
#ifndef DF_RESPONSE_H
#define DF_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#define RESP_TAG_MAX 136 /* identities longer than 128 characters are ignored */

typedef struct {
    long status;                     /* of the last status line */
    int n_status;                    /* status lines seen (redirects + 1) */
    /* of the last response */
    int have_range;
    uint64_t range_first, range_last, range_total;
    int have_length;
    uint64_t length;
    int retry_after;                 /* seconds a 429/503 asked to wait (0: none) */
    char etag[RESP_TAG_MAX];         /* "W/" prefix kept for weak tags */
    /* anywhere in the chain */
    char linked_etag[RESP_TAG_MAX];
    char commit[41];                 /* X-Repo-Commit: 40 lowercase hex, else "" */
} Response;

/* Facts about a file: learned from a response, or expected of one (zero / "" fields: unknown,
 * not checked). */
typedef struct {
    uint64_t total;                  /* file size */
    char identity[RESP_TAG_MAX];
    char sha256[65];                 /* published SHA-256 (an X-Linked-ETag that is one), or "" */
    char commit[41];
} RemoteInfo;

void resp_begin(Response *r);
/* One header line as received (status lines included; CR LF optional). */
void resp_header(Response *r, const char *line, size_t n);
/* What the chain published about the file; total from Content-Range, else Content-Length. */
void resp_info(const Response *r, RemoteInfo *info);

/* Whether a response to a request for bytes [off, off + len) is exactly those bytes of the
 * expected file. Returns 0, or -1 with a message in err and *transient set when a retry may help
 * (a 5xx, 408, 429, a wrong range or length); a 200 to a range request (a server that ignores
 * Range) and a different size, identity or commit are permanent. */
int resp_check_range(const Response *r, uint64_t off, uint64_t len, const RemoteInfo *expect, char *err, size_t errlen,
                     int *transient);
/* Whether a response's file is the expected one (size, identity, commit). */
int resp_check_identity(const RemoteInfo *got, const RemoteInfo *expect, char *err, size_t errlen);

int resp_status_transient(long status);
/* " (hint)" for statuses with a likely cause, else "". */
const char *resp_status_hint(long status);

#endif

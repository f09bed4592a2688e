/* http.h - the two requests an install makes, over one reusable (keep-alive) libcurl handle.
 *
 * http_range fetches bytes [off, off+len) of a file and writes them at the same offset of a file
 * descriptor (or into memory). It accepts only "206 Partial Content" whose Content-Range is exactly
 * "bytes off-(off+len-1)/total" with the expected total and whose body is exactly len bytes; a 200
 * (the whole file), a different range or total, or a short or long body is refused before or
 * while writing, so nothing but the requested bytes is ever written where they belong (bytes of a
 * failed transfer may sit in the file, but are never recorded as present).
 * http_whole fetches a small file into memory and checks Content-Length.
 *
 * Failures set a message and classify themselves: transient ones (stalls, dropped connections,
 * 5xx, 408/429, a mangled range) are worth retrying; http_*_retry retry them with exponential
 * backoff (Source's policy). Permanent ones fail at once: 4xx, a server ignoring Range, a file
 * that changed, a host name that does not resolve, a connection refused before any server of the
 * source answered. Response headers are parsed by fetch/response.h. A Conn is used by one thread
 * at a time. */
#ifndef DF_HTTP_H
#define DF_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch/response.h"
#include "fetch/source.h"

typedef struct Conn Conn;

/* Where the source's resolve URLs redirected to (Hugging Face sends LFS files to a signed CDN
 * URL): later range requests for the file go straight there, saving a round trip to the hub per
 * request. Entries are used for at most 10 minutes (signed URLs expire) and dropped when a request
 * through them fails, which then goes back to the resolve URL. Thread-safe; shared by Conns. */
typedef struct UrlCache UrlCache;
UrlCache *urlcache_new(void);
void urlcache_free(UrlCache *uc);


/* cache may be NULL (every request goes to the resolve URL). NULL with a message when libcurl
 * cannot start. */
Conn *conn_new(const Source *src, UrlCache *cache);
void conn_free(Conn *c);
/* Bytes received by all transfers since start (for progress); may be NULL. */
void conn_set_counter(Conn *c, _Atomic uint64_t *counter);
/* Bytes of the current range request written to their place so far, counted across its
 * retries (a retry resumes after them); may be NULL. */
void conn_set_progress(Conn *c, _Atomic uint64_t *progress);

/* expect: what the caller knows of the file (size, identity, commit; NULL or empty fields: not
 * checked); a response for another version of it is refused before a byte is written. With an
 * expectation, a retry resumes after the bytes an interrupted attempt wrote. info (may
 * be NULL) receives what the response published. Exactly one of fd >= 0 and mem != NULL.
 * *transient tells whether a retry may help. */
int http_range(Conn *c, const char *file, uint64_t off, uint64_t len, const RemoteInfo *expect, int fd, uint8_t *mem,
               RemoteInfo *info, int *transient);
int http_range_retry(Conn *c, const char *file, uint64_t off, uint64_t len, const RemoteInfo *expect, int fd,
                     uint8_t *mem, RemoteInfo *info);

/* Whole file into a new buffer (NUL-terminated; caller frees). *missing is set on a 404. */
int http_whole(Conn *c, const char *file, size_t max, char **buf, size_t *len, RemoteInfo *info, int *missing,
               int *transient);
int http_whole_retry(Conn *c, const char *file, size_t max, char **buf, size_t *len, RemoteInfo *info, int *missing);
/* A document at a full URL on the source's host (its API), with the source's token; *status is
 * the HTTP status (0 when none came). Fails for any status but 200. */
int http_api(Conn *c, const char *url, size_t max, char **buf, size_t *len, long *status, int *transient);
int http_api_retry(Conn *c, const char *url, size_t max, char **buf, size_t *len, long *status);

/* Sleeps ms milliseconds unless *stop becomes set (checked every 50 ms). */
void sleep_ms(int ms);

#endif

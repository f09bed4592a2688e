/* source.h - where an install comes from: https://HOST/PATH/resolve/REVISION/FILE.
 *
 * Defaults are Hugging Face's huggingface.co, moonshotai/Kimi-K3, revision main. K3_HF_HOST and
 * K3_HF_PATH select a mirror, K3_HF_REVISION another revision, HF_TOKEN is sent as a bearer
 * token. Every part is validated: the host is a DNS name or IP with an optional port and may carry
 * an explicit "http://" scheme only when it is loopback (localhost, 127.x.x.x, [::1]); the path is
 * "owner/name" segments of safe characters; nothing can inject into the URL or the headers.
 * Timeouts and retry policy also come from the environment (K3_FETCH_*), so tests can be quick. */
#ifndef DF_SOURCE_H
#define DF_SOURCE_H

typedef struct {
    char base[512];        /* "https://host/path/resolve/revision/" */
    char display[480];     /* the same without the scheme, for messages */
    char auth[1100];       /* "Authorization: Bearer ..." or "" */
    int connect_timeout_s; /* K3_FETCH_CONNECT_TIMEOUT (default 20) */
    int stall_timeout_s;   /* K3_FETCH_STALL_TIMEOUT: no byte for this long aborts (default 60) */
    int retries;           /* K3_FETCH_RETRIES: attempts after the first (default 6) */
    int backoff_ms;        /* K3_FETCH_BACKOFF_MS: first retry delay, doubled each time (default 1000) */
    int parallel;          /* K3_FETCH_PARALLEL: concurrent connections (default 8) */
    unsigned long long chunk_bytes; /* K3_FETCH_CHUNK_KB: largest coalesced range (default 65536 KiB) */
} Source;

/* Reads and validates the environment. Fails with a message naming the variable. */
int source_from_env(Source *s);
/* Validation of one host / path / revision value (exposed for tests). */
int source_check_host(const char *host, int *loopback, int *explicit_http);
int source_check_path(const char *path, const char *what);

/* URL of one file (new string, caller frees). `file` must be a plain file name. */
char *source_url(const Source *s, const char *file);

#endif

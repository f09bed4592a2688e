/* source.h - where an install comes from: https://HOST/PATH/resolve/REVISION/FILE.
 *
 * The defaults (the settings' defaults) are Hugging Face's huggingface.co, moonshotai/Kimi-K3,
 * revision main. K3_HF_HOST and K3_HF_PATH select a mirror, K3_HF_REVISION another revision,
 * HF_TOKEN is sent as a bearer token. Every part is validated: the host is a DNS name or IP with
 * an optional port and may carry an explicit "http://" scheme only when it is loopback
 * (localhost, 127.x.x.x, [::1]); the path is "owner/name" segments of safe characters; nothing
 * can inject into the URL or the headers. Timeouts and retry policy are settings too (K3_FETCH_*),
 * so tests can be quick. */
#ifndef DF_SOURCE_H
#define DF_SOURCE_H

#include <stdint.h>

/* What the fetch settings say; the strings are borrowed. */
/* FetchOptions.given: the parts of the source the settings name (not left at their defaults). An
 * install follows the source it records for every part not given (fetch/installer.h). */
enum { FETCH_GIVEN_HOST = 1, FETCH_GIVEN_PATH = 2, FETCH_GIVEN_REVISION = 4 };

typedef struct {
    const char *host;      /* K3_HF_HOST */
    const char *path;      /* K3_HF_PATH: "owner/name" */
    const char *revision;  /* K3_HF_REVISION */
    const char *token;     /* HF_TOKEN, or NULL */
    int connect_timeout_s; /* K3_FETCH_CONNECT_TIMEOUT */
    int stall_timeout_s;   /* K3_FETCH_STALL_TIMEOUT */
    int retries;           /* K3_FETCH_RETRIES */
    int backoff_ms;        /* K3_FETCH_BACKOFF_MS */
    int parallel;          /* K3_FETCH_PARALLEL */
    int chunk_kb;          /* K3_FETCH_CHUNK_KB */
    int64_t disk_free_bytes; /* K3_DISK_FREE_BYTES (tests): the free space to assume; -1: ask the file system */
    unsigned given;        /* FETCH_GIVEN_*: which of host, path, revision were set */
} FetchOptions;

typedef struct {
    char base[800];        /* "https://host/path/resolve/REV/", REV the pinned commit once pinned */
    char display[800];     /* the same without the scheme, for messages */
    char repo[520];        /* "https://host/path": the source an install records */
    char origin[300];      /* "https://host" */
    char path[208];        /* "owner/name" */
    char revision[208];    /* as asked for: K3_HF_REVISION, default "main" */
    char commit[41];       /* the commit the source's URLs are pinned to ("" until source_pin) */
    char auth[1100];       /* "Authorization: Bearer ..." or "" */
    int connect_timeout_s; /* K3_FETCH_CONNECT_TIMEOUT */
    int stall_timeout_s;   /* K3_FETCH_STALL_TIMEOUT: no byte for this long aborts */
    int retries;           /* K3_FETCH_RETRIES: attempts after the first */
    int backoff_ms;        /* K3_FETCH_BACKOFF_MS: first retry delay, doubled each time */
    int parallel;          /* K3_FETCH_PARALLEL: concurrent connections */
    unsigned long long chunk_bytes; /* K3_FETCH_CHUNK_KB: largest coalesced range */
} Source;

/* Builds the source from the options, validating host, path, revision and token. Fails with a
 * message naming the setting. */
int source_init(Source *s, const FetchOptions *o);
/* Validation of one host / path / revision / token value (the settings check them early too);
 * the message says what is wrong, without naming the setting. */
int source_check_host(const char *host, int *loopback, int *explicit_http);
int source_check_path(const char *path);
int source_check_revision(const char *rev);
int source_check_token(const char *token);

/* URL of one file (new string, caller frees). `file` must be a plain file name. */
char *source_url(const Source *s, const char *file);
/* From now on every file is requested at that commit (40 lowercase hex), so the bytes are the
 * commit's whatever the revision name points to later. */
void source_pin(Source *s, const char *commit);
/* Hugging Face's revision API for the revision asked for: it answers the commit and the files
 * (new string). */
char *source_api_url(const Source *s);

#endif

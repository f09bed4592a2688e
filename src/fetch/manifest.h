/* manifest.h - which byte ranges of an install are present and trustworthy.
 *
 * The install is the Hugging Face file set: metadata files written whole, and shards held as
 * sparse files of their full size that contain only the ranges fetched so far. The manifest
 * (deltafin-manifest.txt in the root) records where the install came from (the source, the
 * revision asked for and the commit it was pinned to, when the source named one) and, per file:
 * its size, its identity at the source (ETag, used to refuse bytes of another version), the hash
 * the source published (SHA-256 of LFS files, git blob SHA-1 of small ones) and whether the file
 * was verified against it, the SHA-256 computed here when the file was completed (to tell local
 * damage later), and the present ranges.
 *
 * Text format, version 2 (version 1 files are read and rewritten as 2):
 *   deltafin-manifest 2
 *   source <URL of the repository>
 *   revision <revision asked for> <commit | ->
 *   file <name> <size> <whole 0|1> <ranges> <published: sha256:HEX | git-sha1:HEX | -> <local SHA-256 | -> <verified 0|1> <identity | ->
 *   <begin> <end>                      (one line per present range, sorted, disjoint)
 *
 * The one invariant: a range is recorded only after its bytes were written and fsynced (a range
 * may be the prefix of a transfer still in flight: fetch/runner.c records those too). Writers
 * call manifest_add_written() once a range's bytes are in the file; manifest_commit() then
 * fdatasyncs every file with such ranges, merges them into the present set and replaces the
 * manifest file atomically (write tmp, fsync, rename, fsync directory). A kill at any moment leaves
 * a manifest that promises only durable bytes; anything else in the files is never trusted.
 *
 * Every function is thread-safe (one mutex). The manifest owns its entries; `fd` fields belong to
 * the caller, which sets them for files it writes (commit fdatasyncs them). */
#ifndef DF_MANIFEST_H
#define DF_MANIFEST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MANIFEST_FILE "deltafin-manifest.txt"

typedef struct {
    uint64_t begin, end; /* [begin, end) */
} Range;

#define MANIFEST_PUB_MAX 80  /* "git-sha1:" + 40 or "sha256:" + 64 */
#define MANIFEST_ID_MAX 136  /* as fetch/response.h's RESP_TAG_MAX */

typedef struct {
    char *name;          /* file name inside the root */
    uint64_t size;       /* expected full size */
    char pub[MANIFEST_PUB_MAX]; /* published hash "sha256:HEX" / "git-sha1:HEX", "" when none */
    char local[65];      /* SHA-256 computed here once the file was complete, "" until then */
    char identity[MANIFEST_ID_MAX]; /* the source's ETag for these bytes, "" when it gave none */
    int verified;        /* whole file hashed and equal to pub */
    int whole;           /* metadata file: written whole, present = one range [0, size) */
    Range *r;            /* present ranges, sorted, disjoint, merged */
    int n, cap;
    int fd;              /* caller's writable descriptor (-1: none) */
} ManifestFile;

typedef struct {
    int file;
    Range r;
} WrittenRange;

typedef struct {
    char *path;
    pthread_mutex_t mu;
    int version;         /* of the file loaded (0: none) */
    char source[520];    /* "https://host/owner/name" */
    char revision[208];  /* asked for ("main"); "" in a version 1 manifest */
    char commit[41];     /* the commit the install is pinned to, "" when the source named none */
    ManifestFile *f;
    int n;
    WrittenRange *w;     /* written, not yet synced and recorded */
    int n_w, cap_w;
    int dirty;           /* in-memory state differs from the file */
} Manifest;

/* Loads root/deltafin-manifest.txt (absent: empty manifest). A malformed manifest is an error. */
int manifest_load(Manifest *m, const char *root);
/* The same from text (label names it in messages); m->path is left NULL. */
int manifest_parse(Manifest *m, const char *text, size_t len, const char *label);
/* The manifest as text (new buffer, caller frees). */
char *manifest_serialise(Manifest *m, size_t *len);
void manifest_free(Manifest *m);

/* What the source says of a file now. Empty strings: not known (nothing compared or changed). */
typedef struct {
    uint64_t size;
    int whole;
    const char *pub;      /* "sha256:HEX" / "git-sha1:HEX" */
    const char *identity;
    int adopt;            /* a different identity cannot be compared (another mirror's ETag): it is
                           * recorded without a reset */
} ManifestFacts;

/* Index of the entry for `name`, created when absent. An existing entry whose size, kind,
 * published hash or identity differs from the facts is reset (its ranges, local hash and
 * verification dropped: the bytes will be fetched again) and *was_reset set when it held any. */
int manifest_entry(Manifest *m, const char *name, const ManifestFacts *facts, int *was_reset);
int manifest_find(Manifest *m, const char *name);
/* Drops every range of entry i (its bytes will be fetched again). */
void manifest_reset(Manifest *m, int i);
void manifest_set_verified(Manifest *m, int i, int verified);
/* Records the SHA-256 of the complete file computed here. */
void manifest_set_local(Manifest *m, int i, const char *sha256_hex);
/* Records the source's revision (asked for) and commit ("" when not pinned). */
void manifest_set_revision(Manifest *m, const char *source, const char *revision, const char *commit);

/* 1 when [begin, end) of entry i is wholly present: recorded, or written by this process and
 * awaiting the next commit (valid bytes, not yet durable). */
int manifest_has(Manifest *m, int i, uint64_t begin, uint64_t end);
/* The end of the run of present bytes (as manifest_has counts them) that starts at `at`; `at`
 * itself when that byte is missing. */
uint64_t manifest_present_end(Manifest *m, int i, uint64_t at);
/* 1 when [begin, end) is recorded in the manifest file (survives a crash). */
int manifest_has_durable(Manifest *m, int i, uint64_t begin, uint64_t end);
uint64_t manifest_present_bytes(Manifest *m, int i);
/* Appends the parts of [begin, end) not present in entry i to *out (grown with df_realloc). */
void manifest_missing(Manifest *m, int i, uint64_t begin, uint64_t end, Range **out, int *n, int *cap);

/* Record that [begin, end) of entry i has been written (not yet durable). */
void manifest_add_written(Manifest *m, int i, uint64_t begin, uint64_t end);
/* fdatasync the written files, record their ranges, and save if anything changed. */
int manifest_commit(Manifest *m);

/* Inserts [begin, end) into a sorted merged range list (exposed for tests). */
void ranges_insert(Range **r, int *n, int *cap, uint64_t begin, uint64_t end);

#endif

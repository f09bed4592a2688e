/* manifest.h - which byte ranges of an install are present and trustworthy.
 *
 * The install is the Hugging Face file set: metadata files written whole, and shards held as
 * sparse files of their full size that contain only the ranges fetched so far. The manifest
 * (deltafin-manifest.txt in the root) lists, per file, its expected size, the SHA-256 the source
 * published (if any), whether the whole file was verified against it, and the present ranges.
 *
 * The one invariant: a range is recorded only after its bytes were written and fsynced. Writers
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
#include <stdint.h>

#define MANIFEST_FILE "deltafin-manifest.txt"

typedef struct {
    uint64_t begin, end; /* [begin, end) */
} Range;

typedef struct {
    char *name;          /* file name inside the root */
    uint64_t size;       /* expected full size */
    char sha256[65];     /* published hash, "" when the source publishes none */
    int verified;        /* whole file hashed and equal to sha256 */
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
    char source[512];
    ManifestFile *f;
    int n;
    WrittenRange *w;     /* written, not yet synced and recorded */
    int n_w, cap_w;
    int dirty;           /* in-memory state differs from the file */
} Manifest;

/* Loads root/deltafin-manifest.txt (absent: empty manifest). A malformed manifest is an error. */
int manifest_load(Manifest *m, const char *root);
void manifest_free(Manifest *m);

/* Index of the entry for `name`, creating it (size, sha256 may be "") when absent. An existing
 * entry whose size differs is reset (its ranges dropped) and *was_reset set. */
int manifest_entry(Manifest *m, const char *name, uint64_t size, const char *sha256, int whole, int *was_reset);
int manifest_find(Manifest *m, const char *name);
/* Drops every range of entry i (its bytes will be fetched again). */
void manifest_reset(Manifest *m, int i);
void manifest_set_verified(Manifest *m, int i, int verified);

/* 1 when [begin, end) of entry i is wholly present: recorded, or written by this process and
 * awaiting the next commit (valid bytes, not yet durable). */
int manifest_has(Manifest *m, int i, uint64_t begin, uint64_t end);
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

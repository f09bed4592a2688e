/* revision.h - what Hugging Face's revision API says about a revision:
 *   GET /api/models/{owner}/{name}/revision/{revision}?blobs=true
 *   {"sha": "<commit>", "siblings": [{"rfilename": "config.json", "size": 2429,
 *     "blobId": "<git blob SHA-1>", "lfs": {"sha256": "<hex>", "size": N}}, ...], ...}
 * The answer is hostile input: the commit must be 40 hex digits, every field used is type- and
 * range-checked, and a refusal names the field. Entries in subfolders are skipped (an install
 * uses only top-level files). RevisionInfo owns its memory; revision_free releases it. */
#ifndef DF_REVISION_H
#define DF_REVISION_H

#include <stddef.h>
#include <stdint.h>

#define REVISION_MAX_FILES 1000000

typedef struct {
    char *name;
    int have_size;
    uint64_t size;
    char blob[41];        /* git blob SHA-1, "" when absent */
    char lfs_sha256[65];  /* an LFS file's SHA-256, "" when it is not one */
} RevisionFile;

typedef struct {
    char commit[41];
    RevisionFile *f;
    int n;
} RevisionInfo;

int revision_parse(RevisionInfo *ri, const char *text, size_t len, const char *label);
void revision_free(RevisionInfo *ri);
/* The entry of a top-level file, or NULL. */
const RevisionFile *revision_find(const RevisionInfo *ri, const char *name);
/* The hash it publishes for a file, as the manifest records it ("sha256:HEX" for LFS files,
 * "git-sha1:HEX" otherwise, "" when none), into out[80]. */
void revision_pub(const RevisionFile *f, char out[80]);

#endif

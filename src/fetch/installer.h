/* installer.h - an install of K3 (or any K3-layout checkpoint) in a root directory, and the
 * operations that complete it from a source (fetch/source.h).
 *
 * The install is the Hugging Face file set: metadata files whole, shards as sparse files of their
 * full size holding the ranges the manifest (fetch/manifest.h) records. An Installer binds the
 * root, its manifest, the validated catalog and, when opened with network access, the source.
 *
 * Opening:
 *   INST_OFFLINE  reads the catalog from the root; no network, writes nothing (doctor, queries).
 *   INST_ONLINE   as OFFLINE, plus the source for fetching (fetch, warm, the run-time store's
 *                 on-demand fetch). Shards are opened for writing only when bytes are fetched into
 *                 them, so a complete install is used read-only (any user who may read it, a
 *                 read-only mount); fetching into a directory this process may not write fails
 *                 with one line saying so.
 *   INST_REFRESH  fetches metadata files and every shard header from the source (8 bytes, then the
 *                 header, by range requests) and builds the catalog from them, writing nothing;
 *                 installer_write_fetched then writes them (after setup has checked the disk). A
 *                 shard whose size, hash or header changed upstream starts over.
 *
 * The source: an install records the repository it came from, its revision and the commit that
 * was pinned (fetch/manifest.h). Every part of the source the settings do not name
 * (FetchOptions.given) is the recorded one, so a streaming install keeps fetching from its own
 * mirror. When the settings name another repository or revision, ONLINE refuses to fetch (the
 * bytes could not be tied to the installed revision; a complete install still runs), and REFRESH
 * (setup) moves the install to the new source, starting over every file whose bytes nothing ties
 * to it (the same published hash, SHA-256 identity or pinned commit).
 *
 * Plans list missing byte ranges; installer_run fetches them in parallel (K3_FETCH_PARALLEL
 * keep-alive connections), records them durably as they complete and reports progress.
 *
 * On-demand (for the streaming store): installer_fetch_expert fetches one routed expert's span
 * into its shard and records it before returning; it is thread-safe, several may be in flight,
 * and concurrent calls for the same expert wait for one transfer. installer_has_expert is a cheap
 * manifest query. The Installer owns everything it opened; installer_close releases it. */
#ifndef DF_INSTALLER_H
#define DF_INSTALLER_H

#include <stddef.h>
#include <stdint.h>

#include "fetch/manifest.h"
#include "fetch/source.h"
#include "format/catalog.h"

typedef enum { INST_OFFLINE, INST_ONLINE, INST_REFRESH } InstallAccess;

typedef struct Installer Installer;

typedef struct {
    int file;            /* manifest entry */
    uint64_t begin, end; /* [begin, end) */
} FetchJob;

typedef struct {
    FetchJob *job;
    int n, cap;
    uint64_t bytes;
} FetchPlan;

/* What an Installer is opened on. fetch: the source's settings (copied; its strings must outlive
 * the Installer); unused when OFFLINE. */
typedef struct {
    const char *root;
    InstallAccess access;
    int dry_run;         /* REFRESH: keep everything in memory; fail fast when the source is unreachable */
    const FetchOptions *fetch;
} InstallOptions;

int installer_open(Installer **out, const InstallOptions *opt);
/* Binds the install at cat->dir to a catalog the caller opened (borrowed: it must outlive the
 * Installer). For the run-time store: OFFLINE answers queries, ONLINE also fetches on demand.
 * A directory without a manifest (a checkpoint made some other way) counts as complete. */
int installer_attach(Installer **out, const Catalog *cat, InstallAccess mode, const FetchOptions *fetch);
void installer_close(Installer *in);
/* REFRESH: bytes of the metadata and headers fetched, and writing them into the root. */
uint64_t installer_fetched_bytes(const Installer *in);
int installer_write_fetched(Installer *in);

const Catalog *installer_catalog(const Installer *in);
/* The source as messages show it: the one bound for fetching, else the one the manifest records. */
const char *installer_source(const Installer *in);
/* Whether the source the fetch settings name (the recorded one for the parts they leave unset) is
 * not this install's: 1 with why[] saying so (both sources and what to do), 0 when it is, -1 with
 * a message when the settings or the recorded source are malformed. */
int installer_source_mismatch(Installer *in, const FetchOptions *fetch, char *why, size_t n);
/* 0 when this process may create, replace and write files in the directory root (or it does not
 * exist yet); else -1 with one line: root, why not (read-only file system, permission), that
 * `need` requires write access, and `todo`. */
int installer_check_writable(const char *root, const char *need, const char *todo);
/* The same as an errno: 0, or why this process may not write there (EROFS, EACCES). */
int installer_write_errno(const char *root);
/* REFRESH: how the revision was pinned to a commit, or why it could not be (one line). */
const char *installer_pin_note(const Installer *in);
Manifest *installer_manifest(Installer *in);
const char *installer_root(const Installer *in);
/* 1 for a directory without a manifest (not made by setup): its files count as complete. */
int installer_unmanaged(const Installer *in);
/* Manifest entry of shard s (-1 when unmanaged). */
int installer_shard_entry(const Installer *in, int shard);

/* Plans (appended to *p; free with plan_free). Ranges are split/coalesced to at most the
 * source's chunk size (K3_FETCH_CHUNK_KB); adjacent missing experts coalesce into one request. */
void plan_headers_and_spine(Installer *in, FetchPlan *p);
void plan_everything(Installer *in, FetchPlan *p);
/* Missing expert spans of the MoE layers with want[layer] != 0. */
void plan_layers(Installer *in, const uint8_t *want, FetchPlan *p);
/* Missing spans of the listed (layer, expert) pairs, in the given order. */
void plan_experts(Installer *in, const int *layer, const int *expert, int n, FetchPlan *p);
void plan_free(FetchPlan *p);

/* Bytes every shard would hold in a full install, and the bytes of it present now. */
void installer_totals(Installer *in, uint64_t *full, uint64_t *present);
/* Free bytes on the root's file system (FetchOptions.disk_free_bytes overrides, for tests). */
int installer_disk_free(Installer *in, uint64_t *free_bytes);

/* Fetches every job (parallel, resumable, progress on stderr labelled `what`). verify: every
 * shard the plan completes is hashed while it downloads and checked against its published
 * SHA-256 (off for the on-demand fetches a generation waits for; a later fetch, setup or
 * doctor --verify hashes such shards). */
int installer_run(Installer *in, FetchPlan *p, const char *what, int verify);
/* Checks every complete file of the install against its published hash (SHA-256 or git blob
 * SHA-1) and the SHA-256 recorded when it was completed. Files already checked are counted
 * without hashing, except those of at most recheck_upto bytes (0: none, UINT64_MAX: all). Every bad file is named (stderr, and the one-line message);
 * with apply, bad files lose their bytes (the next fetch gets them anew) and hashes computed
 * here are recorded. Progress is shown when the hashing is long. */
typedef struct {
    int verified;        /* complete files matching the hash the source published */
    int local_only;      /* complete files without a published hash: sizes checked (hash recorded) */
    int incomplete;      /* files not complete yet (a streaming install's shards): sizes only */
    int bad;
    int bad_whole;       /* of them metadata files (fetched again by setup, not fetch) */
} VerifyReport;
int installer_verify(Installer *in, uint64_t recheck_upto, int apply, VerifyReport *rep);
/* How the install is tied to its revision: *pinned when it has a commit; *unidentified counts
 * shards with neither a published hash nor an ETag (their later bytes can be checked by size
 * only). */
void installer_pinning(Installer *in, int *pinned, int *unidentified);

/* On demand, thread-safe. */
int installer_has_expert(Installer *in, int layer, int expert);
int installer_fetch_expert(Installer *in, int layer, int expert);
/* Experts (over all MoE layers) whose span is present, and the total. */
void installer_expert_counts(Installer *in, uint64_t *present, uint64_t *total);
/* The start-up reminder of run/chat/serve: local share of the expert pool, what finishing costs
 * and the exact fetch command; "" for a complete install. */
void installer_reminder(Installer *in, char *buf, size_t len);

#endif

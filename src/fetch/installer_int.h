/* installer_int.h - the Installer's fields, shared by the fetch/ files that implement it. */
#ifndef DF_INSTALLER_INT_H
#define DF_INSTALLER_INT_H

#include <pthread.h>

#include "fetch/http.h"
#include "fetch/revision.h"
#include "fetch/installer.h"
#include "fetch/source.h"

/* Bytes fetched by a refresh, written only once setup has checked the disk. */
typedef struct {
    char *name;
    uint8_t *data;
    size_t len;
    char pub[MANIFEST_PUB_MAX];      /* the hash the source publishes, "" when none */
    int verified;                    /* data was checked against pub */
    char identity[MANIFEST_ID_MAX];
    int shard;               /* -1: a metadata file, written whole */
} FetchedFile;

struct Installer {
    char *root;
    InstallAccess access;
    int dry_run;
    int has_source;
    Source src;
    FetchOptions fetch;      /* the settings the source was built from (and K3_DISK_FREE_BYTES) */
    int same_source;         /* the source is the one the manifest records: its ETags compare */
    int switching;           /* REFRESH: the settings name another source than the recorded one */
    char no_fetch[1024];     /* ONLINE: why nothing may be fetched into this install from the source
                              * the settings name (another source or revision), "" when it may */
    RevisionInfo rev;        /* the revision API's answer (setup), when have_rev */
    int have_rev;
    char pin_note[400];      /* how the revision was pinned, or why it could not be */
    UrlCache *urls;          /* redirect targets shared by every connection */
    Manifest man;
    const Catalog *cat;      /* &own, or the caller's (installer_attach) */
    Catalog own;
    int have_own;
    FetchedFile *fetched;
    int n_fetched;
    int unmanaged;           /* attached to a directory without a manifest: every byte is present */
    int *shard_entry;        /* [n_shards] manifest entry of each shard */
    /* idle connections for on-demand fetches */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Conn **idle;
    int n_idle;
    int64_t *inflight;       /* layer * n_experts + expert being fetched on demand */
    int n_inflight, cap_inflight;
    double last_commit;      /* df_now() of the last on-demand commit */
};

/* Opens (creating, sized) shard s for writing and stores the fd in its manifest entry. */
int installer_open_shard(Installer *in, int s);
/* 1 when an identity recorded for a file may be compared with what the source sends now. */
int installer_identity_comparable(const Installer *in, const char *identity);
/* What a response for entry e must match: size, identity (when comparable), pinned commit. */
void installer_expect(const Installer *in, int e, RemoteInfo *expect);
/* Before a fetch: 0 when bytes may be fetched into the install now, else -1 with one line saying
 * why not (the source is not the install's, or the directory is not writable here) and what to
 * do. The caller says first when it has no source at all (K3_OFFLINE=1). */
int installer_may_fetch(Installer *in);
/* Appends [begin, end) of entry `file` to the plan, split at the chunk size. */
void plan_add(Installer *in, FetchPlan *p, int file, uint64_t begin, uint64_t end);

#endif

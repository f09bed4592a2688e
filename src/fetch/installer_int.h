/* installer_int.h - the Installer's fields, shared by the fetch/ files that implement it. */
#ifndef DF_INSTALLER_INT_H
#define DF_INSTALLER_INT_H

#include <pthread.h>

#include "fetch/http.h"
#include "fetch/installer.h"
#include "fetch/source.h"

/* Bytes fetched by a refresh, written only once setup has checked the disk. */
typedef struct {
    char *name;
    uint8_t *data;
    size_t len;
    char sha256[65];
    int shard;               /* -1: a metadata file, written whole */
} FetchedFile;

struct Installer {
    char *root;
    InstallAccess access;
    int dry_run;
    int has_source;
    Source src;
    FetchOptions fetch;      /* the settings the source was built from (and K3_DISK_FREE_BYTES) */
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
/* Appends [begin, end) of entry `file` to the plan, split at the chunk size. */
void plan_add(Installer *in, FetchPlan *p, int file, uint64_t begin, uint64_t end);

#endif

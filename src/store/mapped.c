#include "store/mapped.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/err.h"

static int mapped_acquire(ExpertSource *src, int layer, const int *ids, int n, const uint8_t **spans) {
    MappedStore *ms = (MappedStore *)src;
    for (int i = 0; i < n; i++) {
        const ExpertSpan *sp = catalog_expert(ms->cat, layer, ids[i]);
        if (sp->shard < 0) return df_fail("layer %d has no routed experts", layer);
        spans[i] = ms->base[sp->shard] + sp->offset;
    }
    return 0;
}

int mapped_open(MappedStore *ms, const Catalog *cat) {
    memset(ms, 0, sizeof *ms);
    ms->src.acquire = mapped_acquire;
    ms->cat = cat;
    ms->base = df_calloc((size_t)cat->n_shards, sizeof *ms->base);
    ms->size = df_calloc((size_t)cat->n_shards, sizeof *ms->size);
    for (int i = 0; i < cat->n_shards; i++, ms->n++) {
        char *path = catalog_shard_path(cat, i);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, cat->shards[i].size, PROT_READ, MAP_SHARED, fd, 0);
        int err = errno;
        if (fd >= 0) close(fd);
        if (p == MAP_FAILED) {
            df_fail("%s: cannot map: %s", path, strerror(err));
            free(path);
            mapped_close(ms);
            return -1;
        }
        free(path);
        ms->base[i] = p;
        ms->size[i] = cat->shards[i].size;
    }
    return 0;
}

void mapped_close(MappedStore *ms) {
    for (int i = 0; i < ms->n; i++) munmap((void *)ms->base[i], ms->size[i]);
    free(ms->base);
    free(ms->size);
    memset(ms, 0, sizeof *ms);
}

const void *mapped_tensor_bytes(void *provider, const TensorInfo *t) {
    MappedStore *ms = provider;
    return ms->base[t->shard] + t->offset;
}

#include "store/mapped.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/mats.h"
#include "util/err.h"

static int mapped_acquire(ExpertSource *src, int layer, const int *ids, int n, ExpertMats *out) {
    MappedStore *ms = (MappedStore *)src;
    for (int i = 0; i < n; i++) {
        const ExpertSpan *sp = catalog_expert(ms->cat, layer, ids[i]);
        if (sp->shard < 0) return df_fail("layer %d has no routed experts", layer);
        MatKey key = store_key(ms->id, (uint64_t)layer * (uint64_t)ms->cat->cfg.n_experts + (uint64_t)ids[i], 0);
        out[i] = store_expert_mats(ms->cat, ms->base[sp->shard] + sp->offset, key);
    }
    return 0;
}

static Mat mapped_spine_mat(SpineSource *src, const TensorInfo *t) {
    MappedStore *ms = (MappedStore *)((char *)src - offsetof(MappedStore, spine));
    MatKey key = store_key(ms->id, (uint64_t)(t - ms->cat->tensors), 0);
    Mat m;
    if (ms->i8 && i8spine_mat(ms->i8, t, &m)) {
        m.key = key;
        m.key.part = MAT_PART_INT8;
        return m;
    }
    return store_tensor_mat(t, mapped_tensor_bytes(ms, t), key);
}

int mapped_open(MappedStore *ms, const Catalog *cat) {
    memset(ms, 0, sizeof *ms);
    ms->src.acquire = mapped_acquire;
    ms->src.in_place = 1;
    ms->spine.mat = mapped_spine_mat;
    ms->spine.resident_layers = cat->cfg.n_layers;
    ms->cat = cat;
    ms->id = mat_store_id();
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

void mapped_use_int8(MappedStore *ms, const I8Spine *i8) { ms->i8 = i8; }

const void *mapped_tensor_bytes(const MappedStore *ms, const TensorInfo *t) { return ms->base[t->shard] + t->offset; }

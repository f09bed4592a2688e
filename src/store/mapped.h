/* mapped.h - the whole checkpoint mapped read-only into memory: the simplest weight store.
 *
 * Every shard is mmap'ed once; tensor and expert bytes are pointers into the mappings and stay
 * valid until mapped_close. The kernel's page cache decides what is resident, so this is the
 * store for models that fit in RAM (and the baseline the streaming store is measured against). */
#ifndef DF_MAPPED_H
#define DF_MAPPED_H

#include "format/catalog.h"
#include "model/model.h"

typedef struct {
    ExpertSource src;        /* first member: the model calls it through ExpertSource */
    const Catalog *cat;
    int n;
    const uint8_t **base;    /* [n_shards] mapping of each shard */
    uint64_t *size;
} MappedStore;

int mapped_open(MappedStore *ms, const Catalog *cat);
void mapped_close(MappedStore *ms);
/* TensorBytesFn for weights_bind / model_create (provider = the MappedStore). */
const void *mapped_tensor_bytes(void *provider, const TensorInfo *t);

#endif

/* mapped.h - the whole checkpoint mapped read-only into memory: the simplest weight store.
 *
 * Every shard is mmap'ed once; the Mats it hands out (spine tensors through `spine`, experts
 * through `src`) point into the mappings and stay valid until mapped_close. Their bytes never
 * change, so their residency keys keep generation 0. The kernel's page cache decides what is
 * resident, so this is the store for models that fit in RAM (and the baseline the streaming store
 * is measured against). With an int8 spine attached (mapped_use_int8), the converted tensors are
 * handed out in their int8 form instead. */
#ifndef DF_MAPPED_H
#define DF_MAPPED_H

#include "format/catalog.h"
#include "model/model.h"
#include "store/i8spine.h"

typedef struct {
    ExpertSource src;        /* first member: the model calls it through ExpertSource */
    SpineSource spine;       /* every layer resident */
    const Catalog *cat;
    const I8Spine *i8;       /* NULL, or the int8 spine (borrowed) */
    uint32_t id;             /* the store id of its residency keys */
    int n;
    const uint8_t **base;    /* [n_shards] mapping of each shard */
    uint64_t *size;
} MappedStore;

int mapped_open(MappedStore *ms, const Catalog *cat);
void mapped_close(MappedStore *ms);
/* Hands out the converted spine tensors of i8 (open, borrowed until mapped_close) in their int8
 * form. Call before the model binds its weights. */
void mapped_use_int8(MappedStore *ms, const I8Spine *i8);
/* The raw bytes of tensor t in its shard (for convert-spine). */
const void *mapped_tensor_bytes(const MappedStore *ms, const TensorInfo *t);

#endif

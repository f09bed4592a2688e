/* catalog.h - everything a checkpoint directory holds, validated against the config.
 *
 * catalog_open reads config.json, finds the shards (through model.safetensors.index.json when
 * present, else by their model-NNNNN-of-NNNNNN.safetensors names), parses every shard header and
 * checks the whole tensor inventory against the schema: every expected tensor present with its
 * dtype and shape, no unknown language tensors (vision_tower.* and mm_projector.* are skipped),
 * and, for every (MoE layer, expert), the six expert tensors forming one contiguous span in one
 * shard in the order w1.packed, w1.scale, w2.packed, w2.scale, w3.packed, w3.scale. Experts may
 * sit in any physical order. Any violation fails closed with a message naming file and tensor.
 *
 * The catalog owns all its memory; catalog_free releases it. It is immutable after opening and
 * may be read from any thread. */
#ifndef DF_CATALOG_H
#define DF_CATALOG_H

#include "format/config.h"
#include "format/safetensors.h"

typedef struct {
    char *file;          /* file name inside the checkpoint directory */
    uint64_t size;       /* total file size = data_start + data_size */
    uint64_t data_start; /* absolute offset of the data region */
} ShardRef;

typedef struct {
    int shard;
    uint64_t offset;     /* absolute file offset of w1.weight_packed; the span is expert_bytes long */
} ExpertSpan;

/* Offsets of the six parts inside an expert span ("RawV1" layout). */
typedef struct {
    uint64_t w1p, w1s, w2p, w2s, w3p, w3s;
} ExpertLayout;

typedef struct {
    char *dir;
    K3Config cfg;
    int n_shards;
    ShardRef *shards;
    int n_tensors;
    TensorInfo *tensors;  /* sorted by name */
    int n_skipped;        /* vision_tower.* / mm_projector.* tensors, ignored */
    ExpertSpan *experts;  /* [n_layers * n_experts]; entries of dense layers have shard = -1 */
    uint64_t expert_bytes;/* bytes of one expert span */
    ExpertLayout expert_layout;
    uint64_t spine_bytes; /* all non-expert language tensors */
    uint64_t embed_bytes; /* the embedding (read one row per token, not per layer) */
} Catalog;

int catalog_open(Catalog *cat, const char *dir);

/* Validates headers obtained elsewhere (e.g. fetched by range requests) as catalog_open would.
 * Takes ownership of the headers' tensor arrays; shard_files[i] and sizes come from the caller. */
int catalog_build(Catalog *cat, const char *dir, const K3Config *cfg, StHeader *headers,
                  char *const *shard_files, int n_shards);

void catalog_free(Catalog *cat);

const TensorInfo *catalog_find(const Catalog *cat, const char *name);
static inline const ExpertSpan *catalog_expert(const Catalog *cat, int layer, int expert) {
    return &cat->experts[(size_t)layer * (size_t)cat->cfg.n_experts + (size_t)expert];
}

/* Full path of a shard file (new string, caller frees). */
char *catalog_shard_path(const Catalog *cat, int shard);

/* Shard file name for 1-based index i of n: model-00001-of-000096.safetensors. */
void catalog_shard_name(char *buf, size_t len, int i, int n);

#endif

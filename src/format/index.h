/* index.h - model.safetensors.index.json: which shard holds each tensor.
 *
 * index_parse treats the text as hostile: a JSON object (no duplicate keys) whose weight_map is
 * a non-empty object mapping tensor names to shard names of the form
 * model-NNNNN-of-NNNNNN.safetensors, the distinct shard names forming exactly 1..N of N.
 * Messages name `label` and the offending key. The ShardIndex owns its memory; index_free
 * releases it (also after a failure). */
#ifndef DF_INDEX_H
#define DF_INDEX_H

#include <jansson.h>
#include <stddef.h>

#define INDEX_FILE "model.safetensors.index.json"
#define INDEX_MAX_BYTES (512u << 20)
#define INDEX_MAX_SHARDS 100000

typedef struct {
    json_t *root;       /* the whole document */
    json_t *weight_map; /* borrowed from root: tensor name -> shard file name */
    char **shards;      /* distinct shard file names, sorted (= 1..n_shards of n_shards) */
    int n_shards;
} ShardIndex;

int index_parse(ShardIndex *ix, const char *text, size_t len, const char *label);
void index_free(ShardIndex *ix);

/* Parses "model-NNNNN-of-NNNNNN.safetensors": 0 with the shard's number and the count, or -1. */
int index_shard_number(const char *name, int *i, int *n);

#endif

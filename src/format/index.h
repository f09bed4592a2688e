/* index.h - model.safetensors.index.json: which shard holds each tensor.
 *
 * index_parse treats the text as hostile: a JSON object (no duplicate keys) whose weight_map is
 * a non-empty object mapping tensor names to shard file names. A shard may have any plain name
 * in the model's directory (index_shard_name_ok): K3's model-NNNNN-of-NNNNNN.safetensors,
 * transformers' model-00001-of-00003.safetensors, or another; the index, not the name, says which
 * tensors a shard holds, and the catalog checks that every shard really holds them. Messages name
 * `label` and the offending key. The ShardIndex owns its memory; index_free
 * releases it (also after a failure). */
#ifndef DF_INDEX_H
#define DF_INDEX_H

#include <jansson.h>
#include <stddef.h>

#define INDEX_FILE "model.safetensors.index.json"
#define INDEX_MAX_BYTES (512u << 20)
#define INDEX_MAX_SHARDS 100000
#define INDEX_MAX_NAME 255 /* bytes of a shard's file name */

typedef struct {
    json_t *root;       /* the whole document */
    json_t *weight_map; /* borrowed from root: tensor name -> shard file name */
    char **shards;      /* distinct shard file names, sorted (= 1..n_shards of n_shards) */
    int n_shards;
} ShardIndex;

int index_parse(ShardIndex *ix, const char *text, size_t len, const char *label);
void index_free(ShardIndex *ix);

/* 1 when name (len bytes: a NUL inside is refused) is a safe shard file name: a plain name in
 * the model's directory (no '/' or '\\', no control character, at most INDEX_MAX_NAME bytes)
 * ending in ".safetensors" after at least one character. The one rule for every reader of shard
 * names (catalog, installs). */
int index_shard_name_ok(const char *name, size_t len);

/* Parses "model-NNNNN-of-NNNNNN.safetensors" (K3's names, which a directory without an index is
 * searched for): 0 with the shard's number and the count, or -1. */
int index_shard_number(const char *name, int *i, int *n);

#endif

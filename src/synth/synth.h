/* synth.h - random-weight checkpoints in the exact K3 file layout.
 *
 * A preset fixes the architecture (a K3Config plus layout choices); synth_write produces the
 * Hugging Face file set for it: config.json, generation_config.json, tokenizer files, the
 * safetensors shards and model.safetensors.index.json. Output depends only on (preset, seed):
 * the same arguments give byte-identical files. Weight scales keep activations O(1) through any
 * depth, so the model's outputs are well-conditioned for numerical comparison. */
#ifndef DF_SYNTH_H
#define DF_SYNTH_H

#include <stdint.h>

#include "format/config.h"

typedef struct {
    K3Config cfg;             /* every dimension; a_log_len may exceed kda_heads (padding) */
    uint64_t shard_target;    /* start a new shard once one holds this many bytes */
    const char *name;
} SynthPreset;

typedef struct {
    double size_gb;           /* big: target total size */
    int layers;               /* k3: number of layers (0 = preset default) */
} SynthOptions;

/* Fills *p for preset name tiny|small|big|k3. Returns -1 with a message for an unknown name. */
int synth_preset(SynthPreset *p, const char *name, const SynthOptions *opt);

/* Writes the checkpoint into dir (created if needed). progress: print progress lines to stderr. */
int synth_write(const SynthPreset *p, uint64_t seed, const char *dir, int progress);

/* Writes config.json text for cfg (new string, caller frees). */
char *synth_config_json(const K3Config *cfg);

#endif

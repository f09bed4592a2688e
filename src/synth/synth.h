/* synth.h - random-weight checkpoints in the exact K3 file layout.
 *
 * A preset fixes the architecture (a K3Config plus layout choices); synth_write produces the
 * Hugging Face file set for it: config.json, generation_config.json, tokenizer files, the
 * safetensors shards and model.safetensors.index.json. Output depends only on (preset, seed,
 * options): the same arguments give byte-identical files. Weight scales keep activations O(1)
 * through any depth, so the model's outputs are well-conditioned for numerical comparison.
 *
 * embed_scale multiplies every embedding value. AttnRes mixes its values unnormalised
 * (docs/MODEL.md 4.2), so a large embedding anchor A[0] dominates every AttnRes output, the tail's
 * included: the next token becomes mostly a function of the current one and greedy output falls
 * into cycles, the text n-gram speculation needs to be measured on. 1 (the default) leaves every
 * byte as without the option. */
#ifndef DF_SYNTH_H
#define DF_SYNTH_H

#include <stdint.h>

#include "format/config.h"

typedef struct {
    K3Config cfg;             /* every dimension; a_log_len may exceed kda_heads (padding) */
    uint64_t shard_target;    /* start a new shard once one holds this many bytes */
    const char *name;
    float embed_scale;        /* multiplies the embedding's values; 1 = as the preset */
} SynthPreset;

typedef struct {
    double size_gb;           /* big: target total size */
    int layers;               /* k3: number of layers (0 = preset default) */
} SynthOptions;

/* Fills *p for preset name tiny|small|big|k3 (embed_scale 1). Returns -1 with a message for an
 * unknown name. */
int synth_preset(SynthPreset *p, const char *name, const SynthOptions *opt);
/* Sets p->embed_scale to x, or fails with a message when x is outside 0.001..10000. */
int synth_set_embed_scale(SynthPreset *p, double x);

/* Writes the checkpoint into dir (created if needed). progress: print progress lines to stderr. */
int synth_write(const SynthPreset *p, uint64_t seed, const char *dir, int progress);

/* Writes config.json text for cfg (new string, caller frees), or NULL with a message when
 * jansson cannot build it. */
char *synth_config_json(const K3Config *cfg);

#endif

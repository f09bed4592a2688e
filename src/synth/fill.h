/* fill.h - deterministic random contents for each synthetic tensor, scaled by its role so the
 * model stays well-conditioned (see fill.c for the scales and why). */
#ifndef DF_SYNTH_FILL_H
#define DF_SYNTH_FILL_H

#include <stdint.h>

#include "format/config.h"
#include "format/schema.h"

/* Writes the bytes of tensor e (schema_nbytes(e) bytes), elements [first, first + count) of its
 * flattened form, into out. Chunks can be generated independently and in any order: the
 * stream for each chunk is derived from (seed, name, first). first/count must be multiples of
 * SYNTH_CHUNK_ELEMS except for the last chunk. embed_scale multiplies the embedding's values
 * (1: unchanged). */
#define SYNTH_CHUNK_ELEMS (1u << 20)
void synth_fill(const K3Config *c, const SchemaEntry *e, uint64_t seed, float embed_scale, uint64_t first,
                uint64_t count, void *out);

#endif

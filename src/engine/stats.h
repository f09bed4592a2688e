/* stats.h - one generation's numbers for people (--stats) and for programs (run --stats-json,
 * which `deltafin bench` reads from each child). */
#ifndef DF_STATS_H
#define DF_STATS_H

#include <jansson.h>
#include <stdio.h>

#include "engine/generate.h"

/* --stats: tokens/s, s/token, the per-phase breakdown, speculation and the store's totals. */
void generate_print_stats(const Engine *e, const GenResult *r, FILE *f);
/* run --stats-json: the same numbers as one JSON object (new reference), with the generated ids
 * tokens[0..r->generated), the settings that decide the numerics, and what the store read. */
json_t *generate_stats_json(Engine *e, const GenResult *r, const int *tokens);

#endif

/* trace.h - reading router traces (router_trace.jsonl) to rank experts by use. One JSON object
 * per token maps a layer index (a string key) to the list of expert ids the router chose, either
 * at the top level ({"1":[5,17],...}) or under "layers" as store/trace.h writes them
 * ({"pos":12,"layers":{"1":[5,17],...}}). router_trace_count adds every selection to
 * counts[layer * n_experts + expert]; malformed lines are errors naming the line. */
#ifndef DF_FETCH_TRACE_H
#define DF_FETCH_TRACE_H

#include <stdint.h>

#include "format/config.h"

/* counts: [n_layers * n_experts], zeroed by the caller. *tokens receives the number of lines. */
int router_trace_count(const char *path, const K3Config *cfg, uint64_t *counts, uint64_t *tokens);

#endif

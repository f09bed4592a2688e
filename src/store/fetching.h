/* fetching.h - an ExpertSource that completes a streaming install on demand.
 *
 * Wraps the store's own source. Before a layer's experts are read (at the route hook, so the
 * transfers start as early as the router decides, and again at acquire as a guard) every selected
 * expert the install's manifest does not hold is fetched from the source into its sparse shard,
 * the layer's missing experts in parallel, and recorded durably. Only then does the inner store
 * read it: a missing expert is never computed as the zeros of a sparse file. Without network
 * access the fetch fails and so does the forward, with a message naming the expert. */
#ifndef DF_FETCHING_H
#define DF_FETCHING_H

#include <stdint.h>

#include "fetch/installer.h"
#include "model/model.h"
#include "store/wrap.h"

typedef struct {
    ExpertWrap wrap;      /* first member: passes through what the fetch does not change */
    Installer *inst;      /* borrowed */
    int failed;           /* a route-time fetch failed: acquire reports it */
    uint64_t fetched;     /* experts fetched so far */
} FetchingSource;

void fetching_wrap(FetchingSource *fs, ExpertSource *inner, Installer *inst);

#endif

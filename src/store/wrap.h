/* wrap.h - an expert source that wraps another (the on-demand fetch, the router trace, the replay)
 * begins with an ExpertWrap: expert_wrap_init makes it pass every call through to the inner
 * source, and the wrapper then replaces the calls it changes. */
#ifndef DF_WRAP_H
#define DF_WRAP_H

#include "model/model.h"

typedef struct {
    ExpertSource src;        /* first member: the model calls it through ExpertSource */
    ExpertSource *inner;     /* borrowed */
} ExpertWrap;

void expert_wrap_init(ExpertWrap *w, ExpertSource *inner);

#endif

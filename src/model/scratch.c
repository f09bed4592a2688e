/* scratch.c - the Model's host scratch (internal.h, Scratch): what a pass of up to MODEL_MAX_CHUNK
 * rows stages between the host and the device, and what the CPU threads compute with beside an
 * accelerator. The activations themselves are the device's (devmem.c). One list names every buffer
 * with its size; the allocation, the release and the memory plan (model_memory) all read it, so the
 * plan counts exactly what is allocated. */
#include "model/internal.h"

#include <stdlib.h>

#include "util/err.h"

/* One buffer: the float or int pointer it fills (the other is NULL) and its element count. */
typedef struct {
    float **f;
    int **i;
    size_t n;
} ScratchBuf;

enum { SCRATCH_MAX_BUFS = sizeof(Scratch) / sizeof(float *) }; /* Scratch holds only buffer pointers */

static size_t at_least_1(long long n) { return n > 1 ? (size_t)n : 1; }

/* Every buffer of s for config c into b; returns the count. */
static int scratch_list(Scratch *s, const K3Config *c, ScratchBuf *b) {
    int n = 0;
#define ROWS(p, width) (b[n++] = (ScratchBuf){&(p), NULL, MODEL_MAX_CHUNK * at_least_1(width)})
#define INT_ROWS(p, width) (b[n++] = (ScratchBuf){NULL, &(p), MODEL_MAX_CHUNK * at_least_1(width)})
    ROWS(s->P, c->hidden), ROWS(s->x, c->hidden);
    ROWS(s->router, c->n_experts), ROWS(s->z, c->latent);
    ROWS(s->ex_in, c->latent), ROWS(s->ex_h, 2LL * c->moe_inter), ROWS(s->ex_out, c->latent);
    INT_ROWS(s->sel, c->top_k), ROWS(s->sel_w, c->top_k);
    INT_ROWS(s->look_sel, c->top_k), ROWS(s->look_w, c->top_k);
#undef ROWS
#undef INT_ROWS
    return n;
}

void scratch_alloc(Scratch *s, const K3Config *c) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, b);
    for (int k = 0; k < n; k++) {
        if (b[k].f) *b[k].f = df_calloc(b[k].n, sizeof(float));
        else *b[k].i = df_calloc(b[k].n, sizeof(int));
    }
}

void scratch_free(Scratch *s, const K3Config *c) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, b);
    for (int k = 0; k < n; k++) free(b[k].f ? (void *)*b[k].f : (void *)*b[k].i);
}

uint64_t scratch_bytes(const K3Config *c) {
    Scratch s;
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(&s, c, b);
    uint64_t sum = sizeof(Scratch);
    for (int k = 0; k < n; k++) sum += (uint64_t)b[k].n * (b[k].f ? sizeof(float) : sizeof(int));
    return sum;
}

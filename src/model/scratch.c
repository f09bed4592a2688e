/* scratch.c - the Model's host scratch (internal.h, Scratch): what a pass of up to max_rows rows
 * stages between the host and the device, the bookkeeping of a layer's routed experts, and what the
 * CPU threads compute with beside an accelerator (hybrid). The activations themselves are the
 * device's (devmem.c). One list names every buffer with its size; the allocation, the release and
 * the memory plan (model_memory) all read it, so the plan counts exactly what is allocated. */
#include "model/internal.h"

#include <stdlib.h>

#include "util/err.h"

/* One buffer: where its pointer is, its element count and size. */
typedef struct {
    void **p;
    size_t n, size;
} ScratchBuf;

enum { SCRATCH_MAX_BUFS = 48 };

static size_t at_least_1(long long n) { return n > 1 ? (size_t)n : 1; }

/* Every buffer of s for config c and passes of up to `rows` rows into b (hybrid: the CPU threads'
 * buffers beside an accelerator too); returns the count. */
static int scratch_list(Scratch *s, const K3Config *c, int rows, int hybrid, ScratchBuf *b) {
    const long long R = rows, V = MODEL_MAX_VERIFY, E = c->n_experts, K = c->top_k;
    Routed *r = &s->routed;
    int n = 0;
#define BUF(ptr, count) (b[n++] = (ScratchBuf){(void **)&(ptr), at_least_1(count), sizeof *(ptr)})
    BUF(s->P, R * c->hidden), BUF(s->x, V * c->hidden), BUF(s->router, V * E);
    BUF(s->sel, R * K), BUF(s->sel_w, R * K), BUF(s->look_sel, V * K), BUF(s->look_w, V * K), BUF(s->out_rows, R);
    BUF(r->ids, E), BUF(r->order, E), BUF(r->at, E), BUF(r->rows, E), BUF(r->fill, E), BUF(r->index, E);
    BUF(r->way, E), BUF(r->where, E), BUF(r->miss, E), BUF(r->dslot, E), BUF(r->l_at, E), BUF(r->l_rows, E);
    BUF(r->w1, E), BUF(r->w2, E), BUF(r->w3, E), BUF(r->mats, E), BUF(r->seen, E), BUF(r->src, R * K), BUF(r->sel_of, R * K);
    if (hybrid) {
        BUF(s->z, R * c->latent), BUF(s->ex_in, R * c->latent), BUF(s->ex_h, 2 * R * c->moe_inter);
        BUF(s->ex_out, R * c->latent);
    }
#undef BUF
    return n;
}

void scratch_alloc(Scratch *s, const K3Config *c, int rows, int hybrid) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, rows, hybrid, b);
    for (int k = 0; k < n; k++)
        if (!*b[k].p) *b[k].p = df_calloc(b[k].n, b[k].size);
}

void scratch_free(Scratch *s, const K3Config *c) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, 1, 1, b);
    for (int k = 0; k < n; k++) free(*b[k].p), *b[k].p = NULL;
}

uint64_t scratch_bytes(const K3Config *c, int rows, int hybrid) {
    Scratch s;
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(&s, c, rows, hybrid, b);
    uint64_t sum = sizeof(Scratch);
    for (int k = 0; k < n; k++) sum += (uint64_t)b[k].n * b[k].size;
    return sum;
}

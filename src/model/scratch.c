/* scratch.c - the Model's chunk scratch: activations of up to MODEL_MAX_CHUNK rows, router and
 * expert buffers, attention scores. One list names every buffer with its size; the allocation,
 * the release and the memory plan (model_memory) all read it, so the plan counts exactly what is
 * allocated. */
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

static int max_anchors(const K3Config *c) { return (c->n_layers + c->attn_res_block - 1) / c->attn_res_block; }

/* Every buffer of s for config c and max_context positions into b; returns the count. */
static int scratch_list(Scratch *s, const K3Config *c, int max_context, ScratchBuf *b) {
    const long long H = c->hidden, W = config_kda_width(c), MV = (long long)c->mla_heads * c->v_head;
    const long long ffn = c->dense_inter > c->shared_inter ? c->dense_inter : c->shared_inter;
    const long long cq = c->q_lora > c->kv_lora ? c->q_lora : c->kv_lora;
    int n = 0;
#define ROWS(p, width) (b[n++] = (ScratchBuf){&(p), NULL, MODEL_MAX_CHUNK * at_least_1(width)})
#define FLOATS(p, count) (b[n++] = (ScratchBuf){&(p), NULL, at_least_1(count)})
#define INT_ROWS(p, width) (b[n++] = (ScratchBuf){NULL, &(p), MODEL_MAX_CHUNK * at_least_1(width)})
    ROWS(s->P, H), ROWS(s->x, H), ROWS(s->xn, H), ROWS(s->attn_out, H), ROWS(s->ffn_out, H);
    ROWS(s->anchors, H * max_anchors(c));
    ROWS(s->q, W), ROWS(s->k, W), ROWS(s->v, W), ROWS(s->o, W), ROWS(s->f, W);
    ROWS(s->g, W > MV ? W : MV);
    ROWS(s->fa, c->kda_head_dim), ROWS(s->beta_raw, c->kda_heads);
    ROWS(s->cq, cq);
    ROWS(s->qf, (long long)c->mla_heads * config_mla_qk_dim(c));
    ROWS(s->ckv, c->kv_lora + c->qk_rope);
    ROWS(s->kvf, (long long)c->mla_heads * (c->qk_nope + c->v_head));
    ROWS(s->att, MV);
    FLOATS(s->scores, (long long)c->mla_heads * max_context);
    ROWS(s->qlat, (long long)c->mla_heads * c->kv_lora), ROWS(s->lctx, (long long)c->mla_heads * c->kv_lora);
    ROWS(s->h1, ffn), ROWS(s->h3, ffn);
    ROWS(s->router, c->n_experts), ROWS(s->z, c->latent), ROWS(s->y, c->latent);
    ROWS(s->eo, (long long)c->latent * c->top_k);
    ROWS(s->ex_in, c->latent), ROWS(s->ex_out, c->latent);
    ROWS(s->ex_h1, c->moe_inter), ROWS(s->ex_h3, c->moe_inter);
    INT_ROWS(s->sel, c->top_k), ROWS(s->sel_w, c->top_k);
    INT_ROWS(s->look_sel, c->top_k), ROWS(s->look_w, c->top_k);
#undef ROWS
#undef FLOATS
#undef INT_ROWS
    return n;
}

void scratch_alloc(Scratch *s, const K3Config *c, int max_context) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, max_context, b);
    for (int k = 0; k < n; k++) {
        if (b[k].f) *b[k].f = df_calloc(b[k].n, sizeof(float));
        else *b[k].i = df_calloc(b[k].n, sizeof(int));
    }
}

void scratch_free(Scratch *s, const K3Config *c) {
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(s, c, 0, b);
    for (int k = 0; k < n; k++) free(b[k].f ? (void *)*b[k].f : (void *)*b[k].i);
}

uint64_t scratch_bytes(const K3Config *c, int max_context) {
    Scratch s;
    ScratchBuf b[SCRATCH_MAX_BUFS];
    int n = scratch_list(&s, c, max_context, b);
    uint64_t sum = sizeof(Scratch);
    for (int k = 0; k < n; k++) sum += (uint64_t)b[k].n * (b[k].f ? sizeof(float) : sizeof(int));
    return sum;
}

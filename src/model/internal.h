/* internal.h - what the model's files share: the Model and State layouts and the per-part entry
 * points the forward schedule (k3.c) calls. Not for use outside src/model/. */
#ifndef DF_MODEL_INTERNAL_H
#define DF_MODEL_INTERNAL_H

#include "model/model.h"

typedef struct {
    float *conv;    /* KDA: 3 streams x [width][kernel-1] previous raw inputs, oldest first */
    float *S;       /* KDA: [heads][head_dim (key)][head_dim (value)] */
    float *keys;    /* MLA: [cap][heads][qk_nope + qk_rope] */
    float *values;  /* MLA: [cap][heads][v_head] */
} LayerState;

struct State {
    const Model *model;
    LayerState *layers;
    int len;        /* positions consumed */
    int cap;        /* MLA cache capacity in positions */
};

/* Scratch for one chunk, sized for MODEL_MAX_CHUNK rows; allocated once per model. */
typedef struct {
    float *P, *anchors, *x, *xn, *attn_out, *ffn_out;
    /* KDA */ float *q, *k, *v, *g, *fa, *f, *beta_raw, *o;
    /* MLA */ float *cq, *qf, *ckv, *kvf, *att, *scores;
    /* FFN */ float *h1, *h3, *router, *z, *eo, *y, *ex_in, *ex_h1, *ex_h3, *ex_out;
    int *sel;       /* [T][top_k] selected experts */
    float *sel_w;   /* [T][top_k] their weights */
} Scratch;

struct Model {
    K3Config cfg;
    const Catalog *cat;
    Weights w;
    ExpertSource *experts;
    SpineSource *spine;     /* NULL: the spine stays where model_create bound it */
    Pool *pool;
    Scratch s;
    int max_context;
    ModelStats stats;
};

void kda_forward(Model *m, const LayerWeights *L, LayerState *st, const float *xn, int T, float *out);
void mla_forward(Model *m, const LayerWeights *L, LayerState *st, int base, const float *xn, int T, float *out);
void mlp_forward(Model *m, const MlpWeights *w, int width, const float *u, int T, float *out);
int moe_forward(Model *m, const LayerWeights *L, int layer, const float *u, int T, float *out);
/* Top-k over bias-corrected sigmoid scores; weights renormalised over the unbiased scores. */
void moe_route(const float *logits, const float *bias, int n_experts, int k, int *ids, float *weights);

/* Ensures the MLA caches hold `need` positions (grows geometrically). */
int state_reserve(State *s, int need);

double model_now(void);

#endif

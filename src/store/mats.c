#include "store/mats.h"

MatKey store_key(uint32_t store, uint64_t item, uint64_t gen) {
    MatKey k = {store, MAT_PART_TENSOR, item, gen};
    return k;
}

Mat store_tensor_mat(const TensorInfo *t, const void *bytes, MatKey key) {
    int cols = (int)t->shape[t->ndim - 1], rows = (int)(t->nbytes / dtype_size(t->dtype) / (uint64_t)cols);
    Mat m = {t->dtype == DT_F32 ? WF_F32 : WF_BF16, rows, cols, bytes, NULL, key};
    return m;
}

/* One of the expert's matrices: its packed nibbles and scales at the layout's offsets. */
static Mat expert_mat(const Catalog *cat, const uint8_t *span, MatKey key, uint32_t part) {
    const K3Config *c = &cat->cfg;
    const ExpertLayout *L = &cat->expert_layout;
    uint64_t p = part == MAT_PART_W1 ? L->w1p : part == MAT_PART_W2 ? L->w2p : L->w3p;
    uint64_t s = part == MAT_PART_W1 ? L->w1s : part == MAT_PART_W2 ? L->w2s : L->w3s;
    int down = part == MAT_PART_W2;
    key.part = part;
    Mat m = {WF_MXFP4, down ? c->latent : c->moe_inter, down ? c->moe_inter : c->latent, span + p, span + s, key};
    return m;
}

ExpertMats store_expert_mats(const Catalog *cat, const uint8_t *span, MatKey key) {
    ExpertMats e = {expert_mat(cat, span, key, MAT_PART_W1), expert_mat(cat, span, key, MAT_PART_W2),
                    expert_mat(cat, span, key, MAT_PART_W3)};
    return e;
}

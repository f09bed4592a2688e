/* mats.h - the Mats the stores hand out: a checkpoint tensor as a matrix of its dtype, and a routed
 * expert's three matrices from its span, each with a residency key (kernels/mat.h). This is where
 * the checkpoint's storage formats meet the kernels' weight formats; the model sees only Mats.
 *
 * Keys: a store takes one id (mat_store_id) when it opens and names its items itself (tensors by
 * their catalog index, experts by layer and number or by cache slot); the parts below tell the
 * matrices of one item apart; the generation is the store's to change whenever the item's bytes
 * change. */
#ifndef DF_STORE_MATS_H
#define DF_STORE_MATS_H

#include "format/catalog.h"
#include "kernels/mat.h"
#include "model/model.h"

enum {
    MAT_PART_TENSOR = 0, /* a tensor as the checkpoint stores it */
    MAT_PART_W1 = 1,     /* an expert's gate, down and up matrices */
    MAT_PART_W2 = 2,
    MAT_PART_W3 = 3,
    MAT_PART_INT8 = 4,   /* a tensor's int8 spine form (i8spine.h) */
};

/* The key of item `item` of store `store` at generation gen (part MAT_PART_TENSOR). */
MatKey store_key(uint32_t store, uint64_t item, uint64_t gen);
/* Tensor t as a matrix: BF16 or F32 as its dtype says, [rows][last dimension] (a vector is one
 * row), bytes at `bytes` (NULL allowed: the tensor is not readable now). */
Mat store_tensor_mat(const TensorInfo *t, const void *bytes, MatKey key);
/* The three MXFP4 matrices of the expert whose span (the catalog's expert layout) starts at span:
 * w1 (gate) and w3 (up) [moe_inter][latent], w2 (down) [latent][moe_inter]. key names the span;
 * each matrix gets its part. */
ExpertMats store_expert_mats(const Catalog *cat, const uint8_t *span, MatKey key);

#endif

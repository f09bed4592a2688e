/* mat.h - a weight matrix as the model sees it: a format, a shape, where its bytes are, and the
 * key that says which bytes they are.
 *
 * This is the seam between the model and the compute backend: model code multiplies activations
 * by Mats through the products below and never looks at a weight's storage format; every product
 * runs on the process's device (device.h): the CPU kernels or an accelerator. A Mat does not own
 * its bytes; they belong to whichever store produced it (mapped shard, spine buffer, expert cache)
 * and stay valid as long as that store says.
 *
 * Residency keys. A store hands out every Mat with a MatKey: its own id (mat_store_id), the item
 * (a tensor, an expert, a cache slot) and the part of it (an expert's three matrices), and a
 * generation that the store changes whenever the bytes behind the item change (a streamed layer
 * read into a buffer again, an expert slot refilled). Two Mats with equal keys hold equal bytes, so
 * a device may keep a copy of a weight under its key and reuse it for as long as the key comes
 * back; a key that differs only in its generation means new bytes (the copy is refreshed). A Mat
 * whose key has store 0 promises nothing (a row view, a scratch matrix): it is copied per use. */
#ifndef DF_MAT_H
#define DF_MAT_H

#include <stdint.h>

#include "util/pool.h"

#ifdef __cplusplus /* the CUDA device (C++ by nvcc) falls back to the CPU products */
extern "C" {
#endif

typedef enum {
    WF_BF16,  /* data: uint16 [rows][cols] */
    WF_F32,   /* data: float  [rows][cols] */
    WF_MXFP4, /* data: E2M1 nibbles [rows][cols/2], aux: E8M0 scales [rows][cols/32] */
    WF_I8ROW, /* data: int8 [rows][cols], aux: fp32 scale [rows]; weight = (float)q * scale (lossy spine) */
} WeightFormat;

typedef struct {
    uint32_t store;  /* the issuing store's id (mat_store_id); 0: no key, never kept */
    uint32_t part;   /* which matrix of the item (an expert: 1 gate, 2 down, 3 up; a tensor: its form) */
    uint64_t item;   /* which item of the store (tensor index, expert, cache slot) */
    uint64_t gen;    /* changes whenever the bytes behind the item change */
} MatKey;

typedef struct {
    WeightFormat fmt;
    int rows, cols;
    const void *data;
    const void *aux;
    MatKey key;
} Mat;

/* A new store id (never 0), unique in the process: each store instance takes one. Thread-safe. */
uint32_t mat_store_id(void);
/* 1 when a and b name the same bytes (same key, generation included; store not 0). */
int mat_key_equal(const MatKey *a, const MatKey *b);

/* Y[T][rows] = X[T][cols] . W^T, exact weight expansion, fp32 accumulation, deterministic for
 * any thread count (see kernels.h). */
void mat_mul(Pool *pool, float *Y, const Mat *W, const float *X, int T);

/* Per-head products over blocks of W's rows (MLA's kv_b, whose rows are head-major): head h uses
 * rows [row0 + h * stride, + n) of W. Row t of X holds heads inputs, x_stride floats apart; Y is
 * dense, [T][heads][n] for mat_mul_heads and [T][heads][cols] for mat_tmul_heads. */
typedef struct {
    int heads, row0, stride, n, x_stride;
} MatHeads;
/* Y[t][h] = W_h . X[t][h] (X[t][h] has cols floats): for each head, mat_mul of its block, T = 1. */
void mat_mul_heads(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
/* Y[t][h] = X[t][h] . W_h (X[t][h] has n floats): the transposed product over the head's block,
 * y[i] = sum over its rows j, in order, of x[j] * w[j][i] (one product, then one sum, per term). */
void mat_tmul_heads(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);

/* The same three products on the CPU kernels whatever the device: for a device's fallback when it
 * cannot hold a weight. Same bits. */
void mat_mul_cpu(Pool *pool, float *Y, const Mat *W, const float *X, int T);
void mat_mul_heads_cpu(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
void mat_tmul_heads_cpu(Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);

/* out[i][cols] = row rows[i] of W expanded exactly to fp32, for i < n (the token embedding). The
 * rows must exist. */
void mat_gather_rows(const Mat *W, const int *rows, int n, float *out);
/* out[rows][cols] = all of W expanded exactly to fp32 (the small vectors, at load). */
void mat_expand(const Mat *W, float *out);

/* Rows [row0, row0 + n) of W as a matrix of their own (same format, same bytes, no key). */
Mat mat_rows(const Mat *W, int row0, int n);

/* Bytes of weight data the matrix occupies (for I/O accounting). */
uint64_t mat_bytes(const Mat *W);

#ifdef __cplusplus
}
#endif

#endif

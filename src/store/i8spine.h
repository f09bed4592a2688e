/* i8spine.h - the int8 spine: the resident linear weights (ROLE_SPINE tensors of schema.h)
 * quantised per row, written by `deltafin convert-spine` and mapped for K3_SPINE=int8.
 *
 * Files live in DIR/deltafin-int8/, one per tensor, named "<tensor name>.i8":
 *   bytes 0..63   header, little-endian: magic "DFI8ROW1", uint32 rows, uint32 cols,
 *                 uint64 nbytes of the BF16 source tensor, then zeros
 *   then          fp32 scale [rows]
 *   then          int8 q [rows][cols]
 * Convention: s = max|w| / 127 (fp32 division; 0 for an all-zero row), q = w / s (fp32) rounded
 * half-to-even and clamped to -127..127, and the weight is (float)q * s: one fp32 multiply, which
 * the I8ROW kernel performs exactly, so dequantisation is the same everywhere.
 * A tensor file is written to "<name>.i8.tmp" and renamed when complete, so an interrupted
 * conversion leaves only whole files (and a stale .tmp that the rerun overwrites).
 *
 * I8Spine maps every file and owns the mappings; the Mats it gives point into them and stay valid
 * until i8spine_close. */
#ifndef DF_I8SPINE_H
#define DF_I8SPINE_H

#include "format/catalog.h"
#include "kernels/mat.h"

#define I8SPINE_SUBDIR "deltafin-int8"
#define I8SPINE_HEADER 64

typedef struct {
    const TensorInfo *t;
    const uint8_t *map;
    uint64_t size;
} I8Tensor;

typedef struct {
    int n;
    I8Tensor *t;     /* in i8spine_tensors order */
    uint64_t bytes;  /* int8 data + scales of every tensor */
} I8Spine;

/* The spine tensors that convert-spine converts, in schema order (the globals, then layer by
 * layer: the streamed spine relies on each layer's tensors being consecutive): returns the count
 * and stores a new array of pointers into cat (caller frees the array). */
int i8spine_tensors(const Catalog *cat, const TensorInfo ***out);
/* New string: the path of tensor t's int8 file. */
char *i8spine_path(const Catalog *cat, const TensorInfo *t);
/* 1 when t's file exists with a valid header and size for t, 0 when it does not exist, -1 with a
 * message when it exists but is damaged or belongs to a different tensor. */
int i8spine_check(const Catalog *cat, const TensorInfo *t);
/* Quantises BF16 bytes src of tensor t and writes its file atomically. Fails on a non-finite weight. */
int i8spine_convert(const Catalog *cat, const TensorInfo *t, const void *src);
/* Removes a leftover "<name>.i8.tmp" of an interrupted write (for a tensor whose file is whole). */
void i8spine_remove_stale(const Catalog *cat, const TensorInfo *t);
/* How many of the spine tensors have a complete file (by i8spine_check; damage is an error). */
int i8spine_converted(const Catalog *cat, int *done, int *total);

/* Size of tensor t's int8 file (header, scales, codes), and the offset of its scales in it. */
uint64_t i8spine_file_bytes(const TensorInfo *t);
/* The weight rows of tensor t (its int8 file holds this many scales). */
uint32_t i8spine_rows(const TensorInfo *t);
/* Checks that rows scales (as stored after the header) are finite and >= 0; `where` names the
 * file in the message. */
int i8spine_check_scales(const uint8_t *scales, uint32_t rows, const char *where);

/* Maps every tensor's file, validating headers, sizes and scales. Fails naming the file. */
int i8spine_open(I8Spine *s, const Catalog *cat);
void i8spine_close(I8Spine *s);
/* 1 and the int8 Mat of tensor t (no residency key: the store that hands it out gives it one)
 * when t is a converted spine tensor, else 0. */
int i8spine_mat(const I8Spine *s, const TensorInfo *t, Mat *out);

#endif

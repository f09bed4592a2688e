/* safetensors.h - the safetensors container: an 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}}, then the data region.
 *
 * The parser treats the header as hostile: bounded length, known dtypes only (BF16, F32, U8),
 * shapes whose byte size matches the offsets, and tensors that tile the data region exactly (no
 * gaps, no overlaps). Offsets are converted to absolute file offsets. */
#ifndef DF_SAFETENSORS_H
#define DF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER_BYTES (100u * 1000u * 1000u)
#define ST_MAX_DIMS 4

typedef enum { DT_BF16 = 0, DT_F32, DT_U8, DT_I8, DT_F16 } Dtype;

const char *dtype_name(Dtype d);
size_t dtype_size(Dtype d);

typedef struct {
    char *name;
    Dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t offset; /* absolute byte offset in the shard file */
    uint64_t nbytes;
    int shard;       /* index of the shard in its catalog */
} TensorInfo;

typedef struct {
    uint64_t header_len; /* bytes of JSON */
    uint64_t data_start; /* 8 + header_len */
    uint64_t data_size;  /* bytes of the data region; the file is data_start + data_size long */
    int n;
    TensorInfo *t;       /* owned; in header order */
} StHeader;

/* Parse a header's JSON (json/len) whose data region starts at 8 + header_len. `label` names the
 * file in messages; `shard` is stored in every TensorInfo. */
int st_parse_header(StHeader *h, const char *json, size_t len, int shard, const char *label);
/* Read and parse the header of an open shard, and check the file is exactly as long as the
 * header says (a truncated or padded shard is refused). */
int st_read_header(StHeader *h, int fd, int shard, const char *label);
void st_header_free(StHeader *h);

/* Builds a header for tensors laid out back to back in the given order (their offset fields are
 * filled in, relative to the data region start). The JSON is space-padded to a multiple of 8
 * bytes. Returns a new buffer of 8 + json bytes (length prefix included) the caller frees, or NULL
 * with a message when jansson cannot build it. */
char *st_build_header(TensorInfo *t, int n, size_t *out_len);

#endif

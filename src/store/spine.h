/* spine.h - the non-expert weights ("spine"), resident where the budget allows and streamed
 * layer by layer where it does not.
 *
 * Tensors are grouped per layer; each group is read as a few large aligned runs (shardio.h, no
 * page cache). Pinned layers and the global matrices (lm_head) are read once at open into buffers
 * of their own. Every other layer is streamed through two buffers allocated once: while layer l
 * computes from one, the next streamed layer is read into the other (on the I/O pool), so a
 * forward waits only when the disk is slower than the compute. The small vectors (norms, biases,
 * conv taps) are read at open for weights_bind to copy, and freed by spine_end_load. The token
 * embedding is memory-mapped: only the rows of the tokens seen are ever touched.
 *
 * With int8 (K3_SPINE=int8) the linear weights come from the int8 spine files (i8spine.h) instead
 * of the BF16 tensors, read the same way (O_DIRECT runs into the same buffers), so the memory plan
 * and every read count int8 bytes; each load's scales are checked. The caller checks first that
 * every file exists with a valid header (i8spine_converted).
 *
 * Implements SpineSource. Its Mats carry residency keys (kernels/mat.h) named by the tensor, of
 * generation 0 always: a tensor's bytes never change, whichever buffer a read brings them into, so
 * a device that kept a copy of a streamed layer never needs it again (the GPU's layer pass then
 * stops reading that layer). A streamed layer's Mats have no data while the layer is not acquired;
 * the model asks for them again after each acquire. */
#ifndef DF_SPINE_H
#define DF_SPINE_H

#include <pthread.h>

#include "model/model.h"
#include "store/iopool.h"
#include "store/shardio.h"

typedef struct SpineRun SpineRun;
typedef struct SpineBuf SpineBuf;

typedef struct {
    SpineSource src;          /* first member: the model calls it through SpineSource */
    const Catalog *cat;
    const Shards *shards;
    IoPool *io;
    int n_groups;             /* n_layers, + globals, + small vectors */
    SpineRun *runs;
    int *run_first, *run_count;     /* [n_groups] */
    uint64_t *group_bytes;          /* [n_groups] buffer bytes of a group */
    int *tensor_group;              /* [n_tensors]: group, or -1 (not spine) */
    uint64_t *tensor_off;           /* [n_tensors]: offset in the group's buffer */
    uint8_t **resident;             /* [n_groups]: buffer of a pinned layer / globals / smalls */
    int n_pinned;
    int prefetch;                   /* read the next streamed layer ahead (K3_PREFETCH) */
    uint8_t *elsewhere;             /* [n_layers]: the model holds a copy elsewhere: not read ahead (under mu) */
    SpineBuf *bufs;                 /* [2] stream buffers (NULL when every layer is pinned) */
    SpineBuf *cur;                  /* the acquired streamed layer's buffer */
    int int8;                       /* linear weights from the int8 files */
    Shards i8files;                 /* [n_i8] the int8 files, opened by spine_start */
    const TensorInfo **i8t;         /* [n_i8] the converted tensors (i8spine_tensors order) */
    int n_i8;
    int *tensor_i8;                 /* [n_tensors]: index in i8t, or -1 */
    int *i8_first, *i8_count;       /* [n_groups]: each group's range of i8t */
    uint32_t id;                    /* the store id of its residency keys */
    const uint8_t *embed;           /* mapping of the embedding's pages */
    size_t embed_map_len;
    uint64_t embed_map_off;
    pthread_mutex_t mu;
    pthread_cond_t done;
    uint64_t bytes_read, layers_streamed;   /* under mu */
    IoJob **jobs;                   /* a group's chunks as one batch for the I/O pool (under mu) */
} SpineStore;

/* Computes the layout only (no I/O): group sizes for the memory plan. int8: read the int8 files. */
int spine_layout(SpineStore *ss, const Catalog *cat, int int8);
/* Bytes of layer l's matrices as held in a buffer. */
static inline uint64_t spine_layer_bytes(const SpineStore *ss, int l) { return ss->group_bytes[l]; }
uint64_t spine_globals_bytes(const SpineStore *ss);
uint64_t spine_small_bytes(const SpineStore *ss);
/* Pins layers [0, n_pinned), reads them, the globals and the small vectors; sets up streaming
 * for the rest. want_direct: as for shards_open (the int8 files are opened here). */
int spine_start(SpineStore *ss, const Shards *shards, IoPool *io, int n_pinned, int want_direct);
/* Frees the small vectors once the model has copied them. */
void spine_end_load(SpineStore *ss);
/* The I/O pool must be stopped first. */
void spine_close(SpineStore *ss);
/* Stream buffer i (0 or 1) of spine_stream_buf_bytes(ss, ss->n_pinned) bytes, or NULL when every
 * layer is pinned (for a device to page-lock). */
uint8_t *spine_stream_buf(const SpineStore *ss, int i);
/* Largest streamed layer (0 if none) for pinning n layers. */
uint64_t spine_stream_buf_bytes(const SpineStore *ss, int n_pinned);

#endif

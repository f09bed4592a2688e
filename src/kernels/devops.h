/* devops.h - whole-layer operations on a device's own memory: the steps of the model's one layer
 * schedule (model/k3.c) for a forward of T rows (a decode step: T = 1; a prefill chunk, a verify
 * pass or a batch of several sequences' rows: T > 1).
 *
 * Every device offers them. The CPU is a device (kernels/cpu/cpu_device.h): its "device memory" is
 * host memory and its operations are the CPU kernels run by the compute pool, in one fixed
 * reduction order, so its logits do not depend on the thread count. An accelerator (the CUDA build,
 * kernels/cuda/) keeps a forward's activations, its KDA states and its MLA latent cache in its own
 * memory and runs every step there: norms, AttnRes, the KDA recurrence, MLA latent attention, SiTU,
 * routing, a layer's experts and the head, with the matrix products reading weights it keeps under
 * their residency keys (mat.h). Only the tokens' embedding rows go up and the logits (and each MoE
 * layer's routing, which the expert stores must see) come back.
 *
 * Pointers named "device" below are device memory from alloc, owned by whoever allocated them
 * (the model: its scratch, its vectors, its States' copies) and released with release. Every
 * operation is queued in order on the device's compute stream and returns at once, except get (which
 * waits for everything queued before it); copies into expert slots run on a second stream
 * (slot_fill), ordered against the launches that read the slots by events. The CPU device runs each
 * operation before it returns. A failure of any of them is the device's fault (device.h): the
 * operation then does nothing, later ones do nothing either, and every forward reports the fault.
 *
 * Reduction order. The matrix products are those of device.h, bit-identical on every device. The
 * CPU device's other reductions (RMSNorm and AttnRes sums of squares in fp64, l2 norms, softmax
 * denominators) run left to right; an accelerator sums them by a fixed tree instead, and the GPU's
 * expf may differ from the C library's in the last bit (SiTU does not: kernels/exactmath.h gives
 * both sides the same bits, so an expert computed by the CPU threads equals the device's own):
 * results are deterministic and independent of anything but the inputs, within the fp64
 * reference's tolerance, but not bit-identical to the CPU device (docs/ARCHITECTURE.md, "The GPU"). */
#ifndef DF_DEVOPS_H
#define DF_DEVOPS_H

#include <stddef.h>

#include "kernels/mat.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MatDevice MatDevice;

/* KDA over `rows` consecutive positions for all heads (docs/MODEL.md 4.3): the convolution over
 * the rows, then the recurrence row by row; every pointer is device memory. A row's results do not
 * depend on how many rows follow it (a verify pass's first n rows and a replay of them agree). */
typedef struct {
    int heads, head_dim, kernel;   /* width = heads * head_dim */
    int rows;
    const float *raw[3];           /* q, k, v projections [rows][width] */
    float *conv;                   /* [3][width][kernel - 1] previous raw inputs, oldest first: advanced */
    const float *conv_w[3];        /* [width][kernel] */
    float *qkv[3];                 /* out: q and k normalised (q scaled by 1/sqrt(head_dim)), v, [rows][width] each */
    float *decay;                  /* scratch [rows][width] */
    float *beta;                   /* scratch [rows][heads] */
    const float *f;                /* decay-gate pre-activation [rows][width] */
    const float *beta_raw;         /* [rows][heads] */
    const float *decay_rate;       /* exp(A_log): [heads], or [head_dim] when per_channel */
    int per_channel;
    const float *dt_bias;          /* [width] */
    float gate_lower_bound;
    float *S;                      /* [heads][head_dim][head_dim]: advanced */
    float *o;                      /* out [rows][width]: the recurrence's read-out, before o_norm */
} DevKda;

/* MLA latent attention of `rows` new positions, causal: row r attends over the first n + r cached
 * positions (its own included; the rows' latents are in the cache already). */
typedef struct {
    int heads, kv_lora, qk_nope, qk_rope, n, rows;
    const float *qf;               /* [rows][heads][qk_nope + qk_rope]: the q_pe part is read */
    const float *qlat;             /* [rows][heads][kv_lora]: absorbed queries */
    const float *latent;           /* [n + rows - 1][kv_lora + qk_rope] */
    float *scores;                 /* scratch [rows][heads][n + rows - 1] */
    float *lctx;                   /* out [rows][heads][kv_lora] */
} DevMla;

/* MLA with the expanded cache (the reference layout, model.h MLA_CACHE_EXPANDED) for `rows` new
 * positions after n cached ones: the rows' latents normalised (kv_a_norm, into cq), expanded through
 * kv_b (into kvf: [rows][heads][qk_nope + v_head]), each head's key (its nope part, then the row's
 * raw k_pe) and value appended to the caches at positions n.., then causal attention of each row
 * over the caches: att [rows][heads][v_head], before the output gate. */
typedef struct {
    int heads, kv_lora, qk_nope, qk_rope, v_head, n, rows;
    float eps;
    const Mat *kv_b;
    const float *kv_a_norm;        /* [kv_lora] */
    const float *ckv;              /* [rows][kv_lora + qk_rope]: the raw latent and k_pe */
    const float *qf;               /* [rows][heads][qk_nope + qk_rope] */
    float *cq, *kvf;               /* scratch, as above */
    float *keys, *values;          /* the caches: [cap][heads][qk_nope + qk_rope], [cap][heads][v_head] */
    float *scores;                 /* scratch [heads][n + rows] */
    float *att;                    /* out [rows][heads][v_head] */
} DevMlaExpanded;

/* Phases for mark (the GPU-timeline breakdown of a forward). */
enum { DEV_PHASE_ATTENTION, DEV_PHASE_FFN, DEV_PHASE_EXPERTS, DEV_PHASE_HEAD, DEV_PHASE_IDLE, DEV_N_PHASES };

typedef struct DevOps {
    /* Zeroed device memory of `bytes`, taken from the room the device keeps for weights; NULL (with
     * a message) when there is none. */
    void *(*alloc)(MatDevice *d, size_t bytes);
    void (*release)(MatDevice *d, void *p, size_t bytes);
    /* Host to device, device to device (queued); device to host (waits for the queue; 0, or -1
     * with the fault). */
    void (*put)(MatDevice *d, void *dst, const void *src, size_t bytes);
    void (*copy)(MatDevice *d, void *dst, const void *src, size_t bytes);
    int (*get)(MatDevice *d, void *dst, const void *src, size_t bytes);
    /* Copies W to device memory now and keeps it under its key, if the room for weights allows
     * (experts leave room for the spine, device.h); 1 when it is kept. */
    int (*keep)(MatDevice *d, const Mat *W);
    /* 1 when the device holds a current copy of W (its key and generation): a product of W then reads
     * no host memory. */
    int (*holds)(MatDevice *d, const Mat *W);
    /* The products of mat.h for T rows on device X and Y (laid out as mat.h says). */
    void (*mul)(MatDevice *d, float *Y, const Mat *W, const float *X, int T);
    void (*mul_heads)(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
    void (*tmul_heads)(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T);
    /* out[r] = w * rmsnorm(x[r]) for rows r < rows of n floats, each `stride` floats after the last
     * in x, out and gate alike (w NULL: weightless), then, when gate is not NULL, out[r][i] *=
     * sigmoid(gate[r][i]). out may be x. */
    void (*rmsnorm)(MatDevice *d, float *out, const float *x, const float *w, int n, int rows, size_t stride, float eps,
                    const float *gate);
    /* For rows t < rows: out[t] = AttnRes over the values anchors[i][t] (i < n_anchors; anchor i of
     * row t at anchors + i * anchor_stride + t * dim) and p[t], with pseudo-query q (docs/MODEL.md
     * 4.2); out and p are [rows][dim]; scores: scratch of rows * (n_anchors + 1) floats. */
    void (*attnres)(MatDevice *d, float *out, const float *anchors, int n_anchors, size_t anchor_stride, const float *p,
                    const float *q, int dim, int rows, float eps, float *scores);
    void (*add)(MatDevice *d, float *dst, const float *src, size_t n);       /* dst += src */
    void (*gate)(MatDevice *d, float *x, const float *g, size_t n);          /* x *= sigmoid(g) */
    void (*situ)(MatDevice *d, float *a, const float *b, size_t n, float beta, float beta_lin); /* a = SiTU(a, b) */
    void (*kda)(MatDevice *d, const DevKda *a);
    void (*mla)(MatDevice *d, const DevMla *a);
    /* Routing of each of `rows` rows: ids[t][0..k) and weights[t][0..k) (device) from router logits
     * [rows][n_experts] and the selection bias, as moe_route: top-k of sigmoid + bias, largest
     * first, lowest index on ties; weights the unbiased sigmoids over their sum. */
    void (*route)(MatDevice *d, const float *logits, const float *bias, int n_experts, int k, int rows, int *ids,
                  float *weights);
    /* Routed experts w[0..n) of one layer on one row's input z [latent]: out[slot[i]] = w2 . SiTU(w1 . z, w3 . z),
     * each [latent] (out holds k slots); h: scratch [2][n][inter]. Expert i is read from expert slot
     * dslot[i] (expert_slots; the launch waits for that slot's fill) when dslot is not NULL and
     * dslot[i] >= 0; otherwise from the device's own copy of its weights, and weights the device does
     * not keep are copied from host memory: with wait, it returns once those copies are done (the host
     * memory may then change); without, they may still run (the memory must stay as it is, a mapped
     * file). */
    void (*experts)(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot,
                    const int *dslot, int n, const float *z, float *h, float *out, float beta, float beta_lin, int wait);
    /* Routed experts of a pass of several rows, each on the rows that chose it (gathered): expert i
     * reads rows [at[i], at[i] + rows[i]) of X [.][latent] and writes the same rows of out [.][latent];
     * out = w2 . SiTU(w1 . x, w3 . x) row by row. h: scratch [2][h_rows][inter], h_rows at least
     * the sum of rows[] (the caller splits a layer's experts into calls that fit). Experts of equal
     * rows[] next to each other share a launch. Weights (dslot included) and wait as for experts. */
    void (*experts_rows)(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot, const int *at,
                         const int *rows, int n, const float *X, float *h, int h_rows, float *out, float beta,
                         float beta_lin, int wait);
    /* dst row i = src row idx[i] (each width floats), i < n; idx is device memory. */
    void (*gather)(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width);
    /* For rows t < rows: y[t] = sum over i < k, in order, of weights[t][i] * eo[t][i] (each n floats). */
    void (*combine)(MatDevice *d, float *y, const float *eo, const float *weights, int k, int n, int rows);
    /* Marks the start of a phase on the device's timeline; phase_times adds the seconds between
     * consecutive marks since the last call to secs[phase] and forgets them (after a get). */
    void (*mark)(MatDevice *d, int phase);
    void (*phase_times)(MatDevice *d, double *secs);
    /* Expert slots, the memory of the model's expert cache (model/devcache.h): room for up to `want`
     * experts of `bytes` each (an expert's three matrices, data and scales together), taken from what
     * experts may have (MatDevice.expert_bytes, and what the spine leaves); returns how many it made,
     * numbered from 0 (0: no room). A later call replaces them (want 0: gives them back). While there
     * are slots, the device keeps no other copies of expert weights (keep, and the products'
     * residency, leave experts to the model). */
    int (*expert_slots)(MatDevice *d, size_t bytes, int want);
    /* Queues the copy of one expert from host memory into slot s on the device's copy stream, which
     * runs beside the compute stream: it starts once every launch queued before it has read the
     * slot's previous contents, and launches queued after it that read slot s wait for it. Every
     * expert must have the first one's shapes. The host memory must stay as it is until fills_wait
     * returns (a mapped file may go on: nothing refills it). */
    void (*slot_fill)(MatDevice *d, int s, const Mat *w1, const Mat *w2, const Mat *w3);
    /* Waits for every slot_fill queued so far (their host memory may then change): 0, or -1 with the
     * fault. */
    int (*fills_wait)(MatDevice *d);
    /* Recording (CUDA graphs). From record on, the operations queued are recorded instead of run;
     * the next get runs the recording as one graph. key numbers the recordings of a pass (0, 1, ...
     * in the order made): the device keeps what it built for each key and, when the next pass
     * records the same launches under that key (new arguments: another position, another State),
     * updates it in place instead of building it again. Between record and get only operations on
     * device memory may be queued: mul, mul_heads and tmul_heads of weights the device holds, copy,
     * the kernels and mark; not put, alloc, release, keep, experts, experts_rows, slot_fill or
     * fills_wait. A device without graphs (MatDevice.graphs 0) runs everything as queued: the
     * results are the same either way. Returns 1 when it records, else 0. */
    int (*record)(MatDevice *d, int key);
    /* MLA with the expanded cache (DevMlaExpanded), or NULL: a device without it cannot run a model
     * that keeps that layout, which then runs on the CPU device (its products on this one). */
    void (*mla_expanded)(MatDevice *d, const DevMlaExpanded *a);
    /* dst row idx[i] = src row i (each width floats), i < n: gather's inverse; idx is device memory
     * and names each dst row at most once. */
    void (*scatter)(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width);
} DevOps;

#ifdef __cplusplus
}
#endif

#endif

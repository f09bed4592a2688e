/* The layer schedule (model/k3.c) on a stand-in accelerator: a device whose memory is its own (not
 * the host's: States are copied up and back as to a GPU), which keeps copies of the spine's matrices
 * under their residency keys, has expert slots and records stretches, and computes with the CPU
 * device's operations (kernels/cpu/): the pass must then reproduce the CPU device's pass bit for
 * bit, which checks what the schedule does for an accelerator (every step of every layer, in order,
 * on the right buffers, for one row and for chunks of rows; each chunk's experts gathered by expert
 * and scattered back) and its State handling: prefill chunks of several sizes, decode steps and
 * verify passes kept in full, in part and not at all, all on the device; copies, saves and
 * comparisons of States whose latest values live on the device; the verify passes' commits replayed
 * there without copying the State, for the mapped store and a streamed spine with a small,
 * constantly refilled expert cache, and for experts the device does not hold.
 *
 * The device's expert slots (the layer pass's expert cache, model/devcache.h) are copies of their
 * own, made as late as the contract allows (when a launch reads the slot, or at fills_wait), and
 * the experts a launch reads from a slot are computed from those copies: a wrong slot, or host
 * memory the pass lets change before the copy, shows in the logits. A slot read for an expert the
 * source now hands out under another key (a refilled host slot) is counted as stale. Hits, misses
 * and evictions of a churning cache are checked against the same policy run on the routing the
 * device saw. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/device.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/devops.h"
#include "model/cache_index.h"
#include "model/internal.h"
#include "kernels/vecops.h"
#include "model_fixture.h"

static long n_ops, n_kept, n_gets; /* what the pass asked of the device */

/* Recordings (devops.h record): from record to the next get only operations on device memory may
 * be queued (a GPU records them as a graph). The stand-in runs everything at once, as a device
 * without graphs does, and counts the recordings, and the operations queued in one that a
 * recording may not hold. */
static int recording, last_key = -1;
static long n_recordings, n_broken;
static int h_record(MatDevice *d, int key) {
    (void)d;
    CHECK_MSG(!recording && (key == 0 || key == last_key + 1), "recording %d began after %d (%s)", key, last_key,
              recording ? "still recording" : "ended");
    recording = 1, last_key = key, n_recordings++;
    return 1;
}
static void not_recordable(void) { n_broken += recording; }

static void *h_alloc(MatDevice *d, size_t bytes) { return (void)d, not_recordable(), calloc(1, bytes ? bytes : 1); }
static void h_release(MatDevice *d, void *p, size_t bytes) { (void)d, (void)bytes, not_recordable(), free(p); }
static void h_put(MatDevice *d, void *dst, const void *src, size_t n) { (void)d, not_recordable(), memcpy(dst, src, n); }
static void h_copy(MatDevice *d, void *dst, const void *src, size_t n) { (void)d, memcpy(dst, src, n); }
static void run_queued(void);
static int h_get(MatDevice *d, void *dst, const void *src, size_t n) {
    (void)d, n_gets++;
    recording = 0;
    run_queued();
    if (n) memcpy(dst, src, n);
    return 0;
}
/* The stand-in keeps copies of the spine's matrices under their keys, as a GPU does, and its
 * products read a kept copy: a pass that used a streamed layer's matrices without the device
 * holding them would read whatever the stream buffer holds now. Experts are held only in the
 * expert slots (below). */
enum { MAX_KEPT = 4096 };
static struct {
    MatKey key;
    Mat copy;
} kept_mats[MAX_KEPT];
static int n_kept_mats;

static size_t data_bytes(const Mat *W) {
    const size_t n = (size_t)W->rows * (size_t)W->cols;
    return W->fmt == WF_BF16 ? 2 * n : W->fmt == WF_F32 ? 4 * n : W->fmt == WF_MXFP4 ? n / 2 : n;
}
static size_t aux_bytes(const Mat *W) {
    return W->fmt == WF_MXFP4 ? (size_t)W->rows * (size_t)W->cols / 32 : W->fmt == WF_I8ROW ? 4 * (size_t)W->rows : 0;
}
static void *dup_bytes(const void *p, size_t n) { return n ? memcpy(malloc(n), p, n) : NULL; }

static int find_kept(const Mat *W) {
    for (int i = 0; i < n_kept_mats; i++)
        if (kept_mats[i].key.store == W->key.store && kept_mats[i].key.part == W->key.part && kept_mats[i].key.item == W->key.item) return i;
    return -1;
}
static void forget_kept(void) {
    for (int i = 0; i < n_kept_mats; i++) free((void *)kept_mats[i].copy.data), free((void *)kept_mats[i].copy.aux);
    n_kept_mats = 0;
}
/* The matrix a product reads: the kept copy when it is current, else W where it lies. */
static const Mat *resident(const Mat *W) {
    int i = W->key.store ? find_kept(W) : -1;
    return i >= 0 && mat_key_equal(&kept_mats[i].key, &W->key) ? &kept_mats[i].copy : W;
}
static int h_keep(MatDevice *d, const Mat *W) {
    (void)d, n_kept++, not_recordable();
    if (W->fmt == WF_MXFP4 || !W->key.store || !W->data) return 0;
    int i = find_kept(W);
    if (i < 0) {
        CHECK(n_kept_mats < MAX_KEPT);
        if (n_kept_mats >= MAX_KEPT) return 0;
        i = n_kept_mats++;
    } else
        free((void *)kept_mats[i].copy.data), free((void *)kept_mats[i].copy.aux);
    kept_mats[i].key = W->key, kept_mats[i].copy = *W;
    kept_mats[i].copy.data = dup_bytes(W->data, data_bytes(W)), kept_mats[i].copy.aux = dup_bytes(W->aux, aux_bytes(W));
    return 1;
}
static int h_holds(MatDevice *d, const Mat *W) {
    (void)d;
    return W->fmt != WF_MXFP4 && resident(W) != W;
}
/* The matrix a device product reads: one it does not hold would be copied up for the launch. */
static const Mat *product_weights(const Mat *W) {
    const Mat *r = resident(W);
    n_broken += recording && r == W;
    return r;
}
static void h_mul(MatDevice *d, float *Y, const Mat *W, const float *X, int T) {
    (void)d, n_ops++, mat_mul_cpu(NULL, Y, product_weights(W), X, T);
}
static void h_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_mul_heads_cpu(NULL, Y, product_weights(W), hd, X, T);
}
static void h_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_tmul_heads_cpu(NULL, Y, product_weights(W), hd, X, T);
}

/* The math: the CPU device's operations, on the stand-in's memory (host memory underneath). */
static MatDevice *cpu_dev;
static void h_rmsnorm(MatDevice *d, float *out, const float *x, const float *w, int n, int rows, size_t stride, float eps,
                      const float *gate) {
    (void)d, cpu_dev->ops->rmsnorm(cpu_dev, out, x, w, n, rows, stride, eps, gate);
}
static void h_attnres(MatDevice *d, float *out, const float *anchors, int n_anchors, size_t anchor_stride, const float *p,
                      const float *q, int dim, int rows, float eps, float *scores) {
    (void)d, cpu_dev->ops->attnres(cpu_dev, out, anchors, n_anchors, anchor_stride, p, q, dim, rows, eps, scores);
}
static void h_add(MatDevice *d, float *dst, const float *src, size_t n) { (void)d, cpu_dev->ops->add(cpu_dev, dst, src, n); }
static void h_gate(MatDevice *d, float *x, const float *g, size_t n) { (void)d, cpu_dev->ops->gate(cpu_dev, x, g, n); }
static void h_situ(MatDevice *d, float *a, const float *b, size_t n, float beta, float beta_lin) {
    (void)d, cpu_dev->ops->situ(cpu_dev, a, b, n, beta, beta_lin);
}
static void h_kda(MatDevice *d, const DevKda *a) { (void)d, cpu_dev->ops->kda(cpu_dev, a); }
static void h_mla(MatDevice *d, const DevMla *a) { (void)d, cpu_dev->ops->mla(cpu_dev, a); }

/* Every routing call the device computed, in order (a forward's MoE layers one after the other):
 * call c routed call_rows[c] rows, their ids from routes[call_at[c]]. */
static int *routes, *call_rows, *call_at, n_calls, cap_calls, n_route_ids, cap_routes;

static void h_route(MatDevice *d, const float *logits, const float *bias, int ne, int k, int rows, int *ids, float *weights) {
    (void)d;
    cpu_dev->ops->route(cpu_dev, logits, bias, ne, k, rows, ids, weights);
    if (n_calls == cap_calls)
        cap_calls = 2 * cap_calls + 64, call_rows = realloc(call_rows, sizeof(int) * (size_t)cap_calls),
        call_at = realloc(call_at, sizeof(int) * (size_t)cap_calls);
    if (n_route_ids + rows * k > cap_routes)
        cap_routes = 2 * (n_route_ids + rows * k), routes = realloc(routes, sizeof *routes * (size_t)cap_routes);
    call_rows[n_calls] = rows, call_at[n_calls++] = n_route_ids;
    memcpy(routes + n_route_ids, ids, sizeof *ids * (size_t)rows * k);
    n_route_ids += rows * k;
}

/* Expert w on rows of x into out (h, the device's scratch for it, is not needed: the CPU device's
 * expert works in its own). */
static void h_expert(const Mat *w1, const Mat *w2, const Mat *w3, const float *x, int rows, float *out, float beta,
                     float beta_lin) {
    const int zero = 0;
    float *h = malloc(sizeof(float) * 2 * (size_t)rows * (size_t)w1->rows);
    cpu_dev->ops->experts_rows(cpu_dev, &w1, &w2, &w3, NULL, &zero, &rows, 1, x, h, rows, out, beta, beta_lin, 1);
    free(h);
}

/* ---- expert slots ---- */

typedef struct {
    Mat src[3];       /* the host matrices of the fill in flight (pending) */
    uint8_t *data[3], *aux[3];
    Mat copy[3];      /* the slot's copies, with the keys they were filled from */
    int pending;
} HostSlot;

static HostSlot *hslots;
static int n_hslots, slot_room; /* slots made; slots the device has room for */
static long n_fills, n_stale;

/* The copy stream runs the slot's fill now (at the latest: a launch reads it, or fills_wait). */
static void run_fill(HostSlot *hs) {
    if (!hs->pending) return;
    for (int p = 0; p < 3; p++) {
        size_t data = data_bytes(&hs->src[p]), aux = aux_bytes(&hs->src[p]);
        hs->data[p] = realloc(hs->data[p], data), hs->aux[p] = realloc(hs->aux[p], aux ? aux : 1);
        memcpy(hs->data[p], hs->src[p].data, data);
        if (aux) memcpy(hs->aux[p], hs->src[p].aux, aux);
        hs->copy[p] = hs->src[p];
        hs->copy[p].data = hs->data[p], hs->copy[p].aux = aux ? hs->aux[p] : NULL;
    }
    hs->pending = 0;
}

static void free_slots(void) {
    for (int s = 0; s < n_hslots; s++)
        for (int p = 0; p < 3; p++) free(hslots[s].data[p]), free(hslots[s].aux[p]);
    free(hslots), hslots = NULL, n_hslots = 0;
}

static int h_expert_slots(MatDevice *d, size_t bytes, int want) {
    (void)d, (void)bytes, not_recordable();
    free_slots();
    n_hslots = want < slot_room ? want : slot_room;
    hslots = calloc((size_t)(n_hslots > 0 ? n_hslots : 1), sizeof *hslots);
    return n_hslots;
}

static void h_slot_fill(MatDevice *d, int s, const Mat *w1, const Mat *w2, const Mat *w3) {
    (void)d, not_recordable();
    CHECK_MSG(s >= 0 && s < n_hslots, "slot %d of %d filled", s, n_hslots);
    if (s < 0 || s >= n_hslots) return;
    run_fill(&hslots[s]); /* the copy stream is in order */
    hslots[s].src[0] = *w1, hslots[s].src[1] = *w2, hslots[s].src[2] = *w3, hslots[s].pending = 1;
    n_fills++;
}

static int h_fills_wait(MatDevice *d) {
    (void)d, not_recordable();
    for (int s = 0; s < n_hslots; s++) run_fill(&hslots[s]);
    return 0;
}

/* Slot s's copies (filled first, as the launch that reads it waits for its fill), each checked
 * against the key the pass meant (w): a copy from bytes the source has since handed out under
 * another key is stale. NULL for a slot that does not exist. */
static HostSlot *read_slot(int s, const Mat *const w[3]) {
    CHECK(s < n_hslots);
    if (s >= n_hslots) return NULL;
    HostSlot *hs = &hslots[s];
    run_fill(hs);
    for (int p = 0; p < 3; p++) n_stale += !mat_key_equal(&hs->copy[p].key, &w[p]->key);
    return hs;
}

/* One-row experts read from slots run late, as on a device whose compute stream is behind: queued,
 * and run when the layer's combination (or a copy to the host) reads their outputs; so a fill the
 * pass did not wait for reads host memory as late as a real device might. */
typedef struct {
    int dslot;
    Mat w[3];          /* the matrices the pass passed (their keys: the bytes it means) */
    const float *z;
    float *out, beta, beta_lin;
} Queued;

static Queued queued[2 * K3_MAX_TOP_K];
static int n_queued;

static void run_queued(void) {
    for (int q = 0; q < n_queued; q++) {
        Queued *e = &queued[q];
        const Mat *meant[3] = {&e->w[0], &e->w[1], &e->w[2]};
        HostSlot *hs = read_slot(e->dslot, meant);
        if (!hs) continue;
        h_expert(&hs->copy[0], &hs->copy[1], &hs->copy[2], e->z, 1, e->out, e->beta, e->beta_lin);
    }
    n_queued = 0;
}

static void h_experts(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot,
                      const int *dslot, int n, const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    (void)d, (void)h, (void)wait, not_recordable();
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)slot[i] * w1[i]->cols;
        if (!dslot || dslot[i] < 0) { /* copied for this launch: done before it returns */
            h_expert(w1[i], w2[i], w3[i], z, 1, o, beta, beta_lin);
            continue;
        }
        CHECK(n_queued < 2 * K3_MAX_TOP_K);
        if (n_queued >= 2 * K3_MAX_TOP_K) return;
        queued[n_queued++] = (Queued){dslot[i], {*w1[i], *w2[i], *w3[i]}, z, o, beta, beta_lin};
    }
}

static long n_expert_rows_calls; /* launches of experts with equal rows: experts_rows must group them */
static void h_experts_rows(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot,
                           const int *at, const int *rows, int n, const float *X, float *h, int h_rows, float *out, float beta,
                           float beta_lin, int wait) {
    (void)d, (void)h, (void)wait, not_recordable();
    n_expert_rows_calls++;
    for (int i = 0; i < n; i++) {
        const size_t latent = (size_t)w1[i]->cols;
        const Mat *w[3] = {w1[i], w2[i], w3[i]};
        CHECK(at[i] >= 0 && at[i] + rows[i] <= h_rows && (i == 0 || rows[i] >= rows[i - 1]));
        HostSlot *hs = dslot && dslot[i] >= 0 ? read_slot(dslot[i], w) : NULL;
        if (hs) w[0] = &hs->copy[0], w[1] = &hs->copy[1], w[2] = &hs->copy[2];
        h_expert(w[0], w[1], w[2], X + (size_t)at[i] * latent, rows[i], out + (size_t)at[i] * latent, beta, beta_lin);
    }
}

static void h_gather(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width) {
    (void)d, cpu_dev->ops->gather(cpu_dev, dst, src, idx, n, width);
}

static void h_scatter(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width) {
    (void)d, cpu_dev->ops->scatter(cpu_dev, dst, src, idx, n, width);
}

static void h_combine(MatDevice *d, float *y, const float *eo, const float *w, int k, int n, int rows) {
    (void)d;
    run_queued();
    cpu_dev->ops->combine(cpu_dev, y, eo, w, k, n, rows);
}

static void h_mark(MatDevice *d, int phase) { (void)d, (void)phase; }
static void h_phase_times(MatDevice *d, double *secs) { (void)d, (void)secs; }
static void h_close(MatDevice *d) { (void)d, forget_kept(); }

static const DevOps host_ops = {h_alloc, h_release, h_put, h_copy, h_get, h_keep, h_holds, h_mul, h_mul_heads, h_tmul_heads,
                                h_rmsnorm, h_attnres, h_add, h_gate, h_situ, h_kda, h_mla, h_route, h_experts,
                                h_experts_rows, h_gather, h_combine, h_mark, h_phase_times, h_expert_slots, h_slot_fill,
                                h_fills_wait, h_record, NULL, h_scatter};

/* The per-product path (prefill, verification, lookahead) reads kept copies too. */
static void cpu_mul(MatDevice *d, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    (void)d, mat_mul_cpu(pool, Y, resident(W), X, T);
}
static void cpu_mul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_mul_heads_cpu(pool, Y, resident(W), hd, X, T);
}
static void cpu_tmul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_tmul_heads_cpu(pool, Y, resident(W), hd, X, T);
}

static MatDevice host_dev;

static void install(void) {
    memset(&host_dev, 0, sizeof host_dev);
    snprintf(host_dev.desc, sizeof host_dev.desc, "host layers");
    host_dev.mul = cpu_mul, host_dev.mul_heads = cpu_mul_heads, host_dev.tmul_heads = cpu_tmul_heads;
    host_dev.close = h_close;
    host_dev.ops = &host_ops;
    host_dev.weight_room = 4ull << 30; /* room for the fixture's spine, its States and the margin */
    CHECK(device_install(&host_dev) == 0);
}

static char dir[] = "/tmp/df-devpass-XXXXXX";
static Engine *base; /* the fixture's model, mapped, on the CPU */
static const int prompt[] = {5, 17, 300, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3, 88, 21, 4, 250, 11};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0], MAX_ROWS = 96 };

typedef struct {
    Model *m;
    float *out;
    int row, V, rc;
    int verify_moved; /* a verify pass, its commit or the decode steps after them copied a State */
} Script;

static float *row_at(const Script *s, int r) { return s->out + (size_t)r * s->V; }
static const float *last(const Script *s) { return row_at(s, s->row - 1); }

/* One greedy decode step of st from the logits `from`, the new logits appended. */
static void step(Script *s, State *st, const float *from) {
    int tok = model_argmax(s->m, from);
    if (!s->rc && s->row < MAX_ROWS) s->rc = model_forward(s->m, st, &tok, 1, row_at(s, s->row++), 0);
}

/* A verify pass of the greedy token and drafts[0..d) with every row's logits appended, keeping
 * `keep` rows (state_commit), then two decode steps from the last kept row. */
static void verify(Script *s, State *st, const int *drafts, int d, int keep) {
    int in[MODEL_MAX_VERIFY] = {model_argmax(s->m, last(s))};
    memcpy(in + 1, drafts, sizeof(int) * (size_t)d);
    const uint64_t syncs = model_stats(s->m)->state_syncs;
    if (s->rc || s->row + d + 1 > MAX_ROWS) return;
    s->rc = model_forward_verify(s->m, st, in, d + 1, row_at(s, s->row));
    state_commit(st, keep);
    s->row += d + 1;
    const float *kept = row_at(s, s->row - d - 1 + (keep < 1 ? 1 : keep > d + 1 ? d + 1 : keep) - 1);
    step(s, st, kept);
    step(s, st, last(s));
    s->verify_moved |= model_stats(s->m)->state_syncs != syncs;
}

static int saved_put(void *ctx, const void *p, size_t n) {
    char **at = ctx;
    memcpy(*at, p, n), *at += n;
    return 0;
}
static int saved_get(void *ctx, void *p, size_t n) {
    char **at = ctx;
    memcpy(p, *at, n), *at += n;
    return 0;
}

/* The prompt in chunks of `chunk` (every row's logits), decode, snapshot (state_copy), decode,
 * verify passes kept in part (2 of 3 rows), in full (3 of 3) and not at all (1 of 4, and 1 of 2
 * with commit 0), each followed by decode steps, a prompt chunk after a pending verification,
 * decode the snapshot, save and load it into a third State and decode that: the logits rows into
 * out (returned: how many); *equal: whether the loaded State equals the snapshot. */
static int script(Engine *e, int chunk, float *out, int *equal, int *verify_moved) {
    Script s = {e->model, out, 0, e->cat.cfg.vocab, 0, 0};
    State *st = state_create(s.m), *snap = state_create(s.m), *third = state_create(s.m);
    for (int at = 0; at < N_PROMPT && !s.rc; at += chunk) {
        int n = N_PROMPT - at < chunk ? N_PROMPT - at : chunk;
        s.rc = model_forward(s.m, st, prompt + at, n, row_at(&s, s.row), 1);
        s.row += n;
    }
    for (int i = 0; i < 6; i++) step(&s, st, last(&s));
    if (!s.rc) s.rc = state_copy(snap, st);
    const float *at_snap = last(&s);
    for (int i = 0; i < 3; i++) step(&s, st, last(&s));
    const int d1[] = {7, 9}, d2[] = {301, 12}, d3[] = {8, 6, 40}, d4[] = {2};
    verify(&s, st, d1, 2, 2);
    verify(&s, st, d2, 2, 3);
    verify(&s, st, d3, 3, 1);
    verify(&s, st, d4, 1, 0);
    /* a verification left pending is ended by the next forward, here a chunk of three */
    int in[4] = {model_argmax(s.m, last(&s)), 33, 44, 55};
    if (!s.rc) s.rc = model_forward_verify(s.m, st, in, 2, row_at(&s, s.row));
    s.row += 2;
    if (!s.rc) s.rc = model_forward(s.m, st, in + 1, 3, row_at(&s, s.row), 1);
    s.row += 3;
    step(&s, st, last(&s));
    step(&s, snap, at_snap);
    for (int i = 0; i < 2; i++) step(&s, snap, last(&s));
    char *buf = malloc(state_saved_bytes(s.m, state_length(snap))), *w = buf, *r = buf;
    if (!s.rc) s.rc = state_save(snap, saved_put, &w);
    if (!s.rc) s.rc = state_load(third, state_length(snap), saved_get, &r);
    *equal = !s.rc && state_equal(third, snap);
    const float *from = last(&s);
    step(&s, third, from);
    step(&s, third, last(&s));
    step(&s, third, last(&s));
    free(buf);
    state_destroy(st), state_destroy(snap), state_destroy(third);
    *verify_moved = s.verify_moved;
    return s.rc ? -1 : s.row;
}

/* The CPU's rows for a chunk size. */
static float *cpu_rows(int chunk, int *rows) {
    float *want = calloc((size_t)MAX_ROWS * (size_t)base->cat.cfg.vocab, sizeof(float));
    int equal = 0, moved = 0;
    *rows = script(base, chunk, want, &equal, &moved);
    CHECK_MSG(*rows > 0 && equal, "cpu pass, chunks of %d: %s", chunk, df_errmsg());
    return want;
}

/* What a layout of the test runs: the engine's options, the prompt's chunk size, the expert slots
 * the device has room for, and whether the host's expert cache is refilled all the time (its
 * experts come back in other slots or generations: the device must copy them again). */
typedef struct {
    const char *what;
    EngineOptions o;
    int chunk, room, refilled;
} Layout;

typedef struct {
    long hits, misses, evictions;
} Counts;

/* The distinct experts of routing call c, ascending (as the pass acquires them); returns how many. */
static int call_experts(int c, int k, int *ids) {
    int n = 0;
    for (int p = 0; p < call_rows[c] * k; p++) {
        int e = routes[call_at[c] + p], at = n;
        for (int j = 0; j < n && at == n; j++)
            if (ids[j] >= e) at = j;
        if (at < n && ids[at] == e) continue;
        memmove(ids + at + 1, ids + at, sizeof(int) * (size_t)(n - at));
        ids[at] = e, n++;
    }
    return n;
}

/* The layer pass's cache protocol replayed on the routing the device computed, with its policy:
 * per MoE layer (one routing call, of one row or a chunk's) the previous layer's slots unlocked (a
 * new pass when the layers start over), the hits among its distinct experts held, every miss
 * copied into a slot while one is not locked for the layer (the likeliest to be used again first;
 * the rest copied for the one use), then one use of each distinct expert in ascending order. For the mapped store (keys never change) and every miss copied. */
static Counts simulate(const K3Config *c, CachePolicy policy, int n_slots) {
    CacheIndex ci;
    cidx_init(&ci, policy, n_slots, c->n_layers, c->n_experts);
    Counts k = {0, 0, 0};
    const int moe = c->n_layers - c->first_dense;
    int held[(MODEL_BATCH_ROWS * K3_MAX_TOP_K)], n_held = 0, last = -1;
    for (int r = 0; r < n_calls; r++) {
        const int layer = c->first_dense + r % moe;
        int ids[(MODEL_BATCH_ROWS * K3_MAX_TOP_K)], miss[(MODEL_BATCH_ROWS * K3_MAX_TOP_K)], n_miss = 0, n = call_experts(r, c->top_k, ids);
        for (int i = 0; i < n_held; i++) cidx_lock(&ci, held[i], 0);
        n_held = 0;
        if (layer <= last) cidx_next_pass(&ci);
        last = layer;
        for (int i = 0; i < n; i++) {
            int slot = cidx_lookup(&ci, layer * c->n_experts + ids[i]);
            if (slot < 0) {
                int key = layer * c->n_experts + ids[i], at = n_miss++;
                while (at > 0 && ci.weight[layer * c->n_experts + miss[at - 1]] < ci.weight[key]) miss[at] = miss[at - 1], at--;
                miss[at] = ids[i];
            } else
                k.hits++, cidx_lock(&ci, slot, 1), held[n_held++] = slot;
        }
        for (int i = 0; i < n_miss; i++) {
            int slot = cidx_victim(&ci, layer);
            k.misses++;
            if (slot < 0) continue; /* every slot is locked for the layer: copied for the one use */
            k.evictions += ci.key_of_slot[slot] >= 0;
            cidx_assign(&ci, slot, layer * c->n_experts + miss[i]);
            cidx_lock(&ci, slot, 1), held[n_held++] = slot;
        }
        for (int i = 0; i < n; i++) {
            int key = layer * c->n_experts + ids[i];
            cidx_use(&ci, key, cidx_lookup(&ci, key));
        }
    }
    cidx_free(&ci);
    return k;
}

/* The cache's counts, as the way of running the experts it misses and its size say they must be. */
static void check_cache(const Layout *L, Engine *e) {
    const ModelStats *ms = model_stats(e->model);
    const DevCacheCounts *dc = &ms->dev_cache;
    const K3Config *c = &e->cat.cfg;
    const HostExperts way = L->o.host_experts;
    const int total = (c->n_layers - c->first_dense) * c->n_experts, cpu = ms->experts_cpu > 0, copied = ms->experts_copied > 0;
    int holds_all = 0, slots = model_device_slots(e->model, &holds_all);
    CHECK_MSG(slots == (L->room < total ? L->room : total), "%s: %d slots for room %d", L->what, slots, L->room);
    CHECK_MSG(n_stale == 0, "%s: %ld launches read a slot whose host bytes were refilled since", L->what, n_stale);
    CHECK_MSG(n_fills == (long)dc->admitted + (holds_all ? total : 0), "%s: %ld fills, %llu admissions", L->what, n_fills,
              (unsigned long long)dc->admitted); /* (a cache holding every expert was filled at start-up) */
    if (slots == 0) { /* no cache: every expert the way it was told */
        if (way == HOST_EXPERTS_CPU) CHECK_MSG(cpu && !copied, "%s: %d %d", L->what, cpu, copied);
        else if (way == HOST_EXPERTS_COPY) CHECK_MSG(!cpu && copied, "%s: %d %d", L->what, cpu, copied);
        else CHECK_MSG(cpu && copied, "%s: both ways are measured: %d %d", L->what, cpu, copied);
        return;
    }
    long routed = 0;
    for (int r = 0; r < n_calls; r++) {
        int ids[(MODEL_BATCH_ROWS * K3_MAX_TOP_K)];
        routed += call_experts(r, c->top_k, ids);
    }
    CHECK_MSG((long)(dc->hits + dc->misses) == routed, "%s: %llu hits + %llu misses of %ld routed", L->what,
              (unsigned long long)dc->hits, (unsigned long long)dc->misses, routed);
    CHECK_MSG(dc->misses == ms->experts_cpu + ms->experts_copied, "%s: misses %llu, %llu on the CPU, %llu copied", L->what,
              (unsigned long long)dc->misses, (unsigned long long)ms->experts_cpu, (unsigned long long)ms->experts_copied);
    if (holds_all) {
        CHECK_MSG(dc->misses == 0 && !cpu && !copied, "%s: the cache holds every expert, yet %llu misses", L->what,
                  (unsigned long long)dc->misses);
        return;
    }
    if (L->refilled)
        CHECK_MSG(dc->recopies > 0, "%s: no expert was copied again after its host slot was refilled (%llu hits, %llu misses)",
                  L->what, (unsigned long long)dc->hits, (unsigned long long)dc->misses);
    else CHECK_MSG(dc->hits > 0, "%s: no hit", L->what);
    /* a miss takes a slot unless every slot is locked for its layer (a pass of several rows may route
     * more distinct experts than a small cache has slots): then it is copied for the one use */
    const int all_fit = slots >= c->top_k * MODEL_MAX_VERIFY;
    if (way == HOST_EXPERTS_CPU) /* every miss computed by the CPU, and copied into the cache meanwhile */
        CHECK_MSG(!copied && dc->admitted > 0 && dc->admitted <= dc->misses && (!all_fit || dc->admitted == dc->misses),
                  "%s: %llu copied, %llu admitted of %llu misses", L->what, (unsigned long long)ms->experts_copied,
                  (unsigned long long)dc->admitted, (unsigned long long)dc->misses);
    else if (way == HOST_EXPERTS_COPY)
        CHECK_MSG(!cpu && dc->admitted > 0 && dc->admitted <= dc->misses && (!all_fit || dc->admitted == dc->misses),
                  "%s: %d, %llu admitted of %llu misses", L->what, cpu, (unsigned long long)dc->admitted,
                  (unsigned long long)dc->misses);
    else { /* what is copied is admitted (while slots are free); the CPU's share is not */
        CHECK_MSG(copied && dc->admitted <= ms->experts_copied && (!all_fit || dc->admitted == ms->experts_copied),
                  "%s: %d %d, %llu admitted", L->what, cpu, copied, (unsigned long long)dc->admitted);
        /* both ways are measured while misses last: a cache that soon holds every expert may stop
         * missing before the CPU's turn */
        if (slots < total) CHECK_MSG(cpu, "%s: the CPU never computed a miss", L->what);
    }
    if (slots < total && L->o.store.kind == STORE_MAPPED && way == HOST_EXPERTS_COPY) {
        Counts k = simulate(c, L->o.store.policy, slots);
        CHECK_MSG(k.hits == (long)dc->hits && k.misses == (long)dc->misses && k.evictions == (long)dc->evictions,
                  "%s: hits %llu, misses %llu, evictions %llu; the policy on the same routing: %ld, %ld, %ld", L->what,
                  (unsigned long long)dc->hits, (unsigned long long)dc->misses, (unsigned long long)dc->evictions, k.hits,
                  k.misses, k.evictions);
        CHECK_MSG(k.evictions > 0, "%s: the cache did not churn", L->what);
    }
}

static void run_layout(const Layout *L) {
    Engine *e;
    int rows = 0;
    float *want = cpu_rows(L->chunk, &rows);
    install();
    n_ops = n_kept = n_gets = n_expert_rows_calls = 0, n_calls = n_route_ids = 0, n_fills = n_stale = 0, slot_room = L->room;
    n_recordings = n_broken = 0;
    CHECK_MSG((e = engine_open(dir, &L->o)) != NULL, "%s: %s", L->what, df_errmsg());
    CHECK_MSG(model_spine_held(e->model) >= 0, "%s: the stand-in device does not run the layers", L->what);
    float *got = calloc((size_t)MAX_ROWS * (size_t)e->cat.cfg.vocab, sizeof(float));
    int equal = 0, moved = 1;
    CHECK_MSG(script(e, L->chunk, got, &equal, &moved) == rows, "%s: %s", L->what, df_errmsg());
    for (int r = 0; r < rows; r++)
        if (memcmp(got + (size_t)r * e->cat.cfg.vocab, want + (size_t)r * e->cat.cfg.vocab, sizeof(float) * (size_t)e->cat.cfg.vocab)) {
            CHECK_MSG(0, "%s, chunks of %d: logits row %d of %d differs from the CPU's", L->what, L->chunk, r, rows);
            break;
        }
    CHECK_MSG(equal, "%s: a State saved from the device and loaded differs", L->what);
    CHECK_MSG(!moved, "%s: a verify pass, its commit or a decode step after it copied the State", L->what);
    /* decode steps (one row, one sequence, every spine weight on the device) are recorded */
    CHECK_MSG(n_recordings > 0 && !recording, "%s: %ld recordings, one left open: %d", L->what, n_recordings, recording);
    CHECK_MSG(n_broken == 0, "%s: %ld operations a recording may not hold were queued in one", L->what, n_broken);
    const ModelStats *ms = model_stats(e->model);
    CHECK_MSG(ms->dev_forwards == ms->forwards && ms->forwards > 0, "%s: %llu of %llu forwards on the device", L->what,
              (unsigned long long)ms->dev_forwards, (unsigned long long)ms->forwards);
    CHECK_MSG(n_ops > 0 && n_gets > 0, "%s: nothing ran on the device (%ld products)", L->what, n_ops);
    if (L->o.host_experts != HOST_EXPERTS_CPU)
        CHECK_MSG(n_expert_rows_calls > 0, "%s: no chunk's experts ran on the device grouped by expert", L->what);
    check_cache(L, e);
    engine_close(e);
    device_close();
    free_slots();
    free(got), free(want);
}

/* A streaming store (streamed spine layers), with fewest: its expert cache at its fewest slots
 * (twice top-k, the memory plan's minimum), so that its slots are refilled all the time. The plan is
 * the one made beside the stand-in device (the layers' scratch is then not host memory). */
static EngineOptions streamed(int fewest) {
    EngineOptions o = fixture_options();
    o.store.kind = STORE_STREAM;
    o.store.populate = 0;
    o.store.pin_layers = 1;
    o.store.ram_bytes = 300000000;
    if (!fewest) return o;
    Engine *e;
    install();
    CHECK_MSG((e = engine_open(dir, &o)) != NULL, "%s", df_errmsg());
    const StreamPlan *p = &e->stream.plan;
    o.store.ram_bytes = p->fixed + p->globals + p->pinned_bytes + 2 * p->stream_buf + 2 * (uint64_t)e->cat.cfg.top_k * p->slot_bytes;
    engine_close(e);
    device_close();
    free_slots();
    return o;
}

static void test_layer_pass_is_the_cpu_pass(void) {
    const EngineOptions mapped = fixture_options();
    EngineOptions copy = mapped, cpu = mapped, way_auto = mapped, short_context = mapped;
    copy.host_experts = HOST_EXPERTS_COPY, cpu.host_experts = HOST_EXPERTS_CPU, way_auto.host_experts = HOST_EXPERTS_AUTO;
    short_context.context = 64; /* a chunk's MLA rows do not fit the scores scratch together: they take turns */
    EngineOptions refilled = streamed(1), refilled_cpu = refilled;
    refilled.host_experts = HOST_EXPERTS_COPY, refilled_cpu.host_experts = HOST_EXPERTS_CPU;
    const Layout layouts[] = {
        {"mapped, every expert in the cache", mapped, 1, 1000, 0},
        {"mapped, every expert in the cache", mapped, 3, 1000, 0},
        {"mapped, every expert in the cache", mapped, 5, 1000, 0},
        {"mapped, every expert in the cache", mapped, 8, 1000, 0},
        {"mapped, every expert in the cache", mapped, N_PROMPT, 1000, 0},
        {"64-position context", short_context, N_PROMPT, 1000, 0},
        {"streamed spine and experts, the cache filled as they come", streamed(0), 5, 1000, 0},
        /* no cache: experts the device does not hold, on the CPU threads, copied, or as measured */
        {"no cache, experts on the CPU", cpu, 7, 0, 0},
        {"no cache, experts copied", copy, 7, 0, 0},
        {"no cache, experts either way, as measured", way_auto, 7, 0, 0},
        /* a cache of 5 of the 32 experts (top-2 of 8, 4 MoE layers): it churns */
        {"small cache, misses copied into it", copy, 1, 5, 0},
        {"small cache, misses copied into it", copy, 7, 5, 0},
        {"small cache, misses on the CPU, copied into it meanwhile", cpu, 5, 5, 0},
        {"small cache, misses split as measured", way_auto, 5, 5, 0},
        /* a host cache of 4 slots: what the device copied from one is soon refilled with other bytes */
        {"a cache over a constantly refilled host cache", refilled, 5, 12, 1},
        {"the same, misses on the CPU and copied into the cache meanwhile", refilled_cpu, 5, 12, 1},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) run_layout(&layouts[i]);
    CHECK_MSG(n_kept > 0, "nothing was made resident");
    EngineOptions o = fixture_options();
    o.device_pass = PASS_PRODUCTS;
    Engine *e;
    install();
    CHECK((e = engine_open(dir, &o)) != NULL);
    CHECK_MSG(model_spine_held(e->model) < 0, "K3_DEV_PASS=products gave the stand-in device the layers");
    engine_close(e);
    device_close();
}

/* A streamed spine the device has room for: the plan pins no layer in RAM, the device keeps every
 * layer after reading each once (nothing read ahead past that), and passes then read no spine
 * bytes (a batch of sequences on the host included), with the CPU's logits. */
static void test_device_keeps_the_streamed_spine(void) {
    enum { STEPS = 4, BATCH_ROWS = 4, ROWS_ALL = STEPS + BATCH_ROWS };
    const int V = base->cat.cfg.vocab;
    float *want = calloc((size_t)ROWS_ALL * V, sizeof(float)), *got = calloc((size_t)ROWS_ALL * V, sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        Engine *e = base, *opened;
        if (pass) {
            EngineOptions o = fixture_options();
            o.store.kind = STORE_STREAM;
            o.store.populate = 0;
            o.store.ram_bytes = 300000000;
            install();
            CHECK_MSG((opened = engine_open(dir, &o)) != NULL, "%s", df_errmsg());
            e = opened;
            CHECK_MSG(e->spine_on_device && e->stream.plan.pinned == 0, "spine on the device %d, %d layers pinned",
                      e->spine_on_device, e->stream.plan.pinned);
            CHECK(model_spine_held(e->model) == e->cat.cfg.n_layers);
        }
        float *out = pass ? got : want;
        /* each streamed layer was read once, and none is read ahead for a pass that will not want it */
        const uint64_t loads = pass ? e->stream.spine.layers_streamed : 0;
        if (pass)
            CHECK_MSG(loads == (uint64_t)(e->cat.cfg.n_layers - e->stream.plan.pinned), "%llu layer reads at start-up",
                      (unsigned long long)loads);
        State *st = state_create(e->model);
        uint64_t before = pass ? stream_counters(&e->stream).spine_bytes : 0;
        CHECK(model_forward(e->model, st, prompt, 5, out, 0) == 0);
        for (int i = 1; i < STEPS; i++) {
            int tok = model_argmax(e->model, out + (size_t)(i - 1) * V);
            CHECK(model_forward(e->model, st, &tok, 1, out + (size_t)i * V, 0) == 0);
        }
        /* a pass of two sequences (the server's batches) runs on the host, its products on the
         * device's copies: it need not read the spine either */
        State *other = state_create(e->model), *both[2] = {st, other};
        const int tokens[BATCH_ROWS] = {model_argmax(e->model, out + (size_t)(STEPS - 1) * V), 17, 300, 42};
        const int rows[2] = {1, 3};
        CHECK(model_forward_batch(e->model, both, tokens, rows, 2, out + (size_t)STEPS * V, 1) == 0);
        state_destroy(other);
        if (pass) {
            uint64_t after = stream_counters(&e->stream).spine_bytes;
            CHECK_MSG(after == before, "passes read %llu spine bytes", (unsigned long long)(after - before));
            CHECK_MSG(e->stream.spine.layers_streamed == loads, "passes read %llu spine layers",
                      (unsigned long long)(e->stream.spine.layers_streamed - loads));
        }
        state_destroy(st);
        if (pass) engine_close(e), device_close();
    }
    CHECK_MSG(!memcmp(got, want, sizeof(float) * STEPS * (size_t)V), "logits differ from the CPU's");
    CHECK_MSG(!memcmp(got + (size_t)STEPS * V, want + (size_t)STEPS * V, sizeof(float) * BATCH_ROWS * (size_t)V),
              "a batch's logits differ from the CPU's");
    free(want), free(got);
}

/* Passes of several sequences (the server's batches): on the device like one sequence's, the rows
 * of each sequence on its own State, the CPU's logits bit for bit: sequences of one and several
 * rows, a fresh State among them, the last row of each or every row asked for, single-sequence
 * passes between batches on the same States, and a context short enough that a sequence's MLA rows
 * take turns; every pass on the device, each State sent up once. */
static int batch_script(Engine *e, float *out) {
    Model *m = e->model;
    const int V = e->cat.cfg.vocab;
    State *a = state_create(m), *b = state_create(m), *c = state_create(m);
    int rc = 0, row = 0;
    rc |= model_forward(m, a, prompt, 5, out + (size_t)row++ * V, 0);
    rc |= model_forward(m, b, prompt + 5, 3, out + (size_t)row++ * V, 0);
    State *abc[3] = {a, b, c}, *ac[2] = {a, c}, *bb[1] = {b};
    const int t1[] = {11, 12, 13, 300, 42, 7, 9}, r1[] = {1, 2, 4};
    rc |= model_forward_batch(m, abc, t1, r1, 3, out + (size_t)row * V, 0); /* the last row of each */
    row += 3;
    const int t2[] = {60, 77, 1}, r2[] = {2, 1};
    rc |= model_forward_batch(m, ac, t2, r2, 2, out + (size_t)row * V, 1); /* every row */
    row += 3;
    const int t3[] = {88};
    rc |= model_forward_batch(m, bb, t3, (const int[]){1}, 1, out + (size_t)row++ * V, 0);
    for (int i = 0; i < 2 && !rc; i++) { /* decode steps of the three together */
        int t[3], r[3] = {1, 1, 1};
        for (int q = 0; q < 3; q++) t[q] = model_argmax(m, out + (size_t)(row - 3 + q) * V);
        rc |= model_forward_batch(m, abc, t, r, 3, out + (size_t)row * V, 0);
        row += 3;
    }
    state_destroy(a), state_destroy(b), state_destroy(c);
    return rc ? -1 : row;
}

static void test_batches_run_on_the_device(void) {
    enum { MAX_BATCH_ROWS = 16 };
    const int V = base->cat.cfg.vocab;
    float *want = calloc((size_t)MAX_BATCH_ROWS * V, sizeof(float)), *got = calloc((size_t)MAX_BATCH_ROWS * V, sizeof(float));
    const int rows = batch_script(base, want);
    CHECK_MSG(rows > 0 && rows <= MAX_BATCH_ROWS, "cpu batches: %s", df_errmsg());
    EngineOptions cached = fixture_options(), few = fixture_options(), short_context = fixture_options();
    few.host_experts = HOST_EXPERTS_AUTO;
    short_context.context = 24; /* a batch's MLA rows of one sequence take turns in the scores scratch */
    const Layout layouts[] = {{"batches, every expert in the cache", cached, 0, 1000, 0},
                              {"batches, a small cache, misses split", few, 0, 5, 0},
                              {"batches, a short context", short_context, 0, 1000, 0}};
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        const Layout *L = &layouts[k];
        Engine *e;
        install();
        n_fills = n_stale = 0, slot_room = L->room, n_recordings = n_broken = 0;
        CHECK_MSG((e = engine_open(dir, &L->o)) != NULL, "%s: %s", L->what, df_errmsg());
        memset(got, 0, sizeof(float) * MAX_BATCH_ROWS * (size_t)V);
        CHECK_MSG(batch_script(e, got) == rows, "%s: %s", L->what, df_errmsg());
        CHECK_MSG(!memcmp(got, want, sizeof(float) * (size_t)rows * V), "%s: logits differ from the CPU's", L->what);
        const ModelStats *ms = model_stats(e->model);
        CHECK_MSG(ms->dev_forwards == ms->forwards, "%s: %llu of %llu passes on the device", L->what,
                  (unsigned long long)ms->dev_forwards, (unsigned long long)ms->forwards);
        CHECK_MSG(ms->state_syncs == 3, "%s: the States were copied %llu times (once each: their first upload)", L->what,
                  (unsigned long long)ms->state_syncs);
        CHECK_MSG(n_stale == 0, "%s: %ld launches read a stale slot", L->what, n_stale);
        CHECK_MSG(n_recordings > 0 && n_broken == 0 && !recording, "%s: %ld recordings, %ld operations they may not hold",
                  L->what, n_recordings, n_broken);
        engine_close(e);
        device_close();
        free_slots();
    }
    free(want), free(got);
}

int main(void) {
    if (!(base = fixture_open(dir, 5))) return 1;
    cpu_dev = cpu_device_create(base->pool, CPU_PRODUCTS_CPU);
    RUN(test_layer_pass_is_the_cpu_pass);
    RUN(test_device_keeps_the_streamed_spine);
    RUN(test_batches_run_on_the_device);
    cpu_device_destroy(cpu_dev);
    fixture_close(base, dir);
    free(routes), free(call_rows), free(call_at);
    return check_summary();
}

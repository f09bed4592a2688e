/* The layer pass (model/devpass.c) on a device whose whole-layer operations (kernels/devops.h)
 * compute on the CPU with the model's own functions, in the model's order: "device memory" is host
 * memory. The pass must then reproduce the CPU path bit for bit, which checks its schedule (every
 * step of every layer, in order, on the right buffers, for one row and for chunks of rows: causal
 * MLA, the KDA convolution and recurrence over the rows, each chunk's experts gathered by expert and
 * scattered back) and its State handling: prefill chunks of several sizes, decode steps and
 * verify passes kept in full, in part and not at all, all on the device; copies, saves and
 * comparisons of States whose latest values live on the device; the verify passes' commits replayed
 * there without copying the State, for the mapped store and a streamed spine with a small,
 * constantly refilled expert cache, and for experts the device does not hold. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/device.h"
#include "kernels/devops.h"
#include "model/internal.h"
#include "model/ops.h"
#include "model_fixture.h"

static long n_ops, n_kept, n_gets; /* what the pass asked of the device */

static void *h_alloc(MatDevice *d, size_t bytes) { return (void)d, calloc(1, bytes ? bytes : 1); }
static void h_release(MatDevice *d, void *p, size_t bytes) { (void)d, (void)bytes, free(p); }
static void h_put(MatDevice *d, void *dst, const void *src, size_t n) { (void)d, memcpy(dst, src, n); }
static void h_copy(MatDevice *d, void *dst, const void *src, size_t n) { (void)d, memcpy(dst, src, n); }
static int h_get(MatDevice *d, void *dst, const void *src, size_t n) {
    (void)d, n_gets++;
    if (n) memcpy(dst, src, n);
    return 0;
}
static int holds_all = 1; /* 0: no expert is kept, so the pass runs them the host way it was told */
/* The stand-in keeps copies of the spine's matrices under their keys, as a GPU does, and its
 * products read a kept copy: a pass that used a streamed layer's matrices without the device
 * holding them would read whatever the stream buffer holds now. (Experts are "held" by holds_all
 * and read where they lie, acquired.) */
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
    (void)d, n_kept++;
    if (W->fmt == WF_MXFP4) return holds_all;
    if (!W->key.store || !W->data) return 0;
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
    return W->fmt == WF_MXFP4 ? holds_all : resident(W) != W;
}
static void h_mul(MatDevice *d, float *Y, const Mat *W, const float *X, int T) {
    (void)d, n_ops++, mat_mul_cpu(NULL, Y, resident(W), X, T);
}
static void h_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_mul_heads_cpu(NULL, Y, resident(W), hd, X, T);
}
static void h_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_tmul_heads_cpu(NULL, Y, resident(W), hd, X, T);
}

static void h_rmsnorm(MatDevice *d, float *out, const float *x, const float *w, int n, int rows, size_t stride, float eps,
                      const float *gate) {
    (void)d;
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * stride;
        op_rmsnorm(o, x + (size_t)r * stride, w, n, eps);
        for (int i = 0; gate && i < n; i++) o[i] *= op_sigmoid(gate[(size_t)r * stride + i]);
    }
}

static void h_attnres(MatDevice *d, float *out, const float *anchors, int n_anchors, size_t anchor_stride, const float *p,
                      const float *q, int dim, int rows, float eps, float *scores) {
    const float *values[K3_MAX_LAYERS + 2];
    (void)d, (void)scores;
    for (int t = 0; t < rows; t++) {
        for (int a = 0; a < n_anchors; a++) values[a] = anchors + (size_t)a * anchor_stride + (size_t)t * dim;
        values[n_anchors] = p + (size_t)t * dim;
        op_attnres(out + (size_t)t * dim, values, n_anchors + 1, q, dim, eps);
    }
}

static void h_add(MatDevice *d, float *dst, const float *src, size_t n) {
    (void)d;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
static void h_gate(MatDevice *d, float *x, const float *g, size_t n) {
    (void)d;
    for (size_t i = 0; i < n; i++) x[i] *= op_sigmoid(g[i]);
}
static void h_situ(MatDevice *d, float *a, const float *b, size_t n, float beta, float beta_lin) {
    (void)d;
    for (size_t i = 0; i < n; i++) a[i] = op_situ(a[i], b[i], beta, beta_lin);
}

/* kda.c's short_conv over the rows, then per row its normalisation, gate and delta_step. */
static void h_kda(MatDevice *dv, const DevKda *a) {
    const int D = a->head_dim, K = a->kernel, W = a->heads * D;
    (void)dv;
    for (int s = 0; s < 3; s++)
        for (int c = 0; c < W; c++) {
            float *h = a->conv + ((size_t)s * W + c) * (size_t)(K - 1);
            const float *wc = a->conv_w[s] + (size_t)c * K;
            for (int t = 0; t < a->rows; t++) {
                float cur = a->raw[s][(size_t)t * W + c], acc = 0;
                for (int j = 0; j < K - 1; j++) acc += wc[j] * h[j];
                acc += wc[K - 1] * cur;
                a->qkv[s][(size_t)t * W + c] = op_silu(acc);
                memmove(h, h + 1, sizeof *h * (size_t)(K - 2));
                h[K - 2] = cur;
            }
        }
    for (int t = 0; t < a->rows; t++)
        for (int hd = 0; hd < a->heads; hd++) {
            const size_t row = (size_t)t * W + (size_t)hd * D;
            float *q = a->qkv[0] + row, *k = a->qkv[1] + row, *v = a->qkv[2] + row;
            float *S = a->S + (size_t)hd * D * D, *o = a->o + row, *decay = a->decay + row, pred[1024];
            op_l2norm_scaled(q, D, 1.0f / sqrtf((float)D));
            op_l2norm_scaled(k, D, 1.0f);
            for (int j = 0; j < D; j++) {
                float rate = a->per_channel ? a->decay_rate[j] : a->decay_rate[hd];
                decay[j] = expf(a->gate_lower_bound * op_sigmoid(rate * (a->f[row + j] + a->dt_bias[hd * D + j])));
            }
            float beta = op_sigmoid(a->beta_raw[(size_t)t * a->heads + hd]);
            for (int j = 0; j < D; j++) pred[j] = 0;
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) S[i * D + j] *= decay[i], pred[j] += k[i] * S[i * D + j];
            for (int j = 0; j < D; j++) pred[j] = beta * (v[j] - pred[j]), o[j] = 0;
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) S[i * D + j] += k[i] * pred[j], o[j] += q[i] * S[i * D + j];
        }
}

/* mla.c's mla_head_latent for each row, causal. */
static void h_mla(MatDevice *d, const DevMla *a) {
    const int R = a->kv_lora, KVW = R + a->qk_rope, QK = a->qk_nope + a->qk_rope, NH = a->heads;
    (void)d;
    for (int t = 0; t < a->rows; t++)
        for (int h = 0; h < NH; h++) {
            const int n = a->n + t;
            float *score = a->scores + ((size_t)t * NH + h) * (size_t)(a->n + a->rows - 1);
            float *lctx = a->lctx + ((size_t)t * NH + h) * R;
            const float *q = a->qf + ((size_t)t * NH + h) * QK, *qlat = a->qlat + ((size_t)t * NH + h) * R;
            for (int u = 0; u < n; u++) {
                const float *lat = a->latent + (size_t)u * KVW;
                score[u] = (op_dot(qlat, lat, R) + op_dot(q + a->qk_nope, lat + R, a->qk_rope)) * (1.0f / sqrtf((float)QK));
            }
            op_softmax(score, n);
            for (int i = 0; i < R; i++) lctx[i] = 0;
            for (int u = 0; u < n; u++) op_axpy(lctx, score[u], a->latent + (size_t)u * KVW, R);
        }
}

static void h_route(MatDevice *d, const float *logits, const float *bias, int ne, int k, int rows, int *ids, float *weights) {
    (void)d;
    for (int t = 0; t < rows; t++) moe_route(logits + (size_t)t * ne, bias, ne, k, ids + t * k, weights + t * k);
}

/* Expert w on rows of x into out; h: [2][h_rows][inter], this expert's rows at h_at. */
static void h_expert(MatDevice *d, const Mat *w1, const Mat *w2, const Mat *w3, const float *x, int rows, float *h, int h_rows,
                     int h_at, float *out, float beta, float beta_lin) {
    const int inter = w1->rows;
    float *h1 = h + (size_t)h_at * inter, *h3 = h + ((size_t)h_rows + h_at) * inter;
    mat_mul_cpu(NULL, h1, w1, x, rows);
    mat_mul_cpu(NULL, h3, w3, x, rows);
    h_situ(d, h1, h3, (size_t)rows * inter, beta, beta_lin);
    mat_mul_cpu(NULL, out, w2, h1, rows);
}

static void h_experts(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot, int n,
                      const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    (void)wait;
    for (int i = 0; i < n; i++)
        h_expert(d, w1[i], w2[i], w3[i], z, 1, h, n, i, out + (size_t)slot[i] * w1[i]->cols, beta, beta_lin);
}

static long n_expert_rows_calls; /* launches of experts with equal rows: experts_rows must group them */
static void h_experts_rows(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *at,
                           const int *rows, int n, const float *X, float *h, int h_rows, float *out, float beta, float beta_lin,
                           int wait) {
    (void)wait;
    n_expert_rows_calls++;
    for (int i = 0; i < n; i++) {
        const size_t latent = (size_t)w1[i]->cols;
        CHECK(at[i] >= 0 && at[i] + rows[i] <= h_rows && (i == 0 || rows[i] >= rows[i - 1]));
        h_expert(d, w1[i], w2[i], w3[i], X + (size_t)at[i] * latent, rows[i], h, h_rows, at[i], out + (size_t)at[i] * latent,
                 beta, beta_lin);
    }
}

static void h_gather(MatDevice *d, float *dst, const float *src, const int *idx, int n, int width) {
    (void)d;
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * width, src + (size_t)idx[i] * width, sizeof(float) * (size_t)width);
}

static void h_combine(MatDevice *d, float *y, const float *eo, const float *w, int k, int n, int rows) {
    (void)d;
    for (int t = 0; t < rows; t++) {
        float *yt = y + (size_t)t * n;
        for (int j = 0; j < n; j++) yt[j] = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < n; j++) yt[j] += w[t * k + i] * eo[((size_t)t * k + i) * n + j];
    }
}

static void h_mark(MatDevice *d, int phase) { (void)d, (void)phase; }
static void h_phase_times(MatDevice *d, double *secs) { (void)d, (void)secs; }
static void h_close(MatDevice *d) { (void)d, forget_kept(); }

static const DevOps host_ops = {h_alloc, h_release, h_put, h_copy, h_get, h_keep, h_holds, h_mul, h_mul_heads, h_tmul_heads,
                                h_rmsnorm, h_attnres, h_add, h_gate, h_situ, h_kda, h_mla, h_route, h_experts,
                                h_experts_rows, h_gather, h_combine, h_mark, h_phase_times};

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
static Engine base; /* the fixture's model, mapped, on the CPU */
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
    float *want = calloc((size_t)MAX_ROWS * (size_t)base.cat.cfg.vocab, sizeof(float));
    int equal = 0, moved = 0;
    *rows = script(&base, chunk, want, &equal, &moved);
    CHECK_MSG(*rows > 0 && equal, "cpu pass, chunks of %d: %s", chunk, df_errmsg());
    return want;
}

static void run_layout(const char *what, EngineOptions o, int chunk) {
    Engine e;
    int rows = 0;
    float *want = cpu_rows(chunk, &rows);
    install();
    n_ops = n_kept = n_gets = n_expert_rows_calls = 0;
    CHECK_MSG(engine_open(&e, dir, &o) == 0, "%s: %s", what, df_errmsg());
    CHECK_MSG(e.model->dev != NULL, "%s: the layer pass was not set up", what);
    float *got = calloc((size_t)MAX_ROWS * (size_t)e.cat.cfg.vocab, sizeof(float));
    int equal = 0, moved = 1;
    CHECK_MSG(script(&e, chunk, got, &equal, &moved) == rows, "%s: %s", what, df_errmsg());
    for (int r = 0; r < rows; r++)
        if (memcmp(got + (size_t)r * e.cat.cfg.vocab, want + (size_t)r * e.cat.cfg.vocab, sizeof(float) * (size_t)e.cat.cfg.vocab)) {
            CHECK_MSG(0, "%s, chunks of %d: logits row %d of %d differs from the CPU's", what, chunk, r, rows);
            break;
        }
    CHECK_MSG(equal, "%s: a State saved from the device and loaded differs", what);
    CHECK_MSG(!moved, "%s: a verify pass, its commit or a decode step after it copied the State", what);
    const ModelStats *ms = model_stats(e.model);
    CHECK_MSG(ms->dev_forwards == ms->forwards && ms->forwards > 0, "%s: %llu of %llu forwards on the device", what,
              (unsigned long long)ms->dev_forwards, (unsigned long long)ms->forwards);
    CHECK_MSG(n_ops > 0 && n_gets > 0, "%s: nothing ran on the device (%ld products)", what, n_ops);
    if (holds_all || o.host_experts != HOST_EXPERTS_CPU)
        CHECK_MSG(n_expert_rows_calls > 0, "%s: no chunk's experts ran on the device grouped by expert", what);
    const int cpu = ms->experts_cpu > 0, copied = ms->experts_copied > 0;
    if (holds_all) CHECK_MSG(!cpu && !copied, "%s: experts ran the host way although the device holds them", what);
    else if (o.host_experts == HOST_EXPERTS_CPU) CHECK_MSG(cpu && !copied, "%s: %d %d", what, cpu, copied);
    else if (o.host_experts == HOST_EXPERTS_COPY) CHECK_MSG(!cpu && copied, "%s: %d %d", what, cpu, copied);
    else CHECK_MSG(cpu && copied, "%s: both ways are measured: %d %d", what, cpu, copied);
    engine_close(&e);
    device_close();
    free(got), free(want);
}

static void test_layer_pass_is_the_cpu_pass(void) {
    EngineOptions o = fixture_options();
    const int chunks[] = {1, 3, 5, 8, N_PROMPT};
    for (int i = 0; i < 5; i++) run_layout("mapped", o, chunks[i]);
    CHECK_MSG(n_kept > 0, "mapped: nothing was made resident");
    o.context = 64; /* a chunk's MLA rows do not fit the scores scratch together: they take turns */
    run_layout("64-position context", o, N_PROMPT);
    o = fixture_options();
    o.store.kind = STORE_STREAM;
    o.store.populate = 0;
    o.store.pin_layers = 1;
    o.store.ram_bytes = 300000000;
    run_layout("streamed spine and experts", o, 5);
    /* experts the device does not hold: on the CPU threads, copied, or as measured */
    holds_all = 0;
    const HostExperts ways[] = {HOST_EXPERTS_CPU, HOST_EXPERTS_COPY, HOST_EXPERTS_AUTO};
    const char *names[] = {"experts on the CPU", "experts copied", "experts either way, as measured"};
    for (int i = 0; i < 3; i++) {
        o = fixture_options();
        o.host_experts = ways[i];
        run_layout(names[i], o, 7);
    }
    holds_all = 1;
    o = fixture_options();
    o.device_pass = PASS_PRODUCTS;
    Engine e;
    install();
    CHECK(engine_open(&e, dir, &o) == 0);
    CHECK_MSG(e.model->dev == NULL, "K3_DEV_PASS=products set up the layer pass");
    engine_close(&e);
    device_close();
}

/* A streamed spine the device has room for: the plan pins no layer in RAM, the device keeps every
 * layer after reading each once, and decode steps then read no spine bytes, with the CPU's logits. */
static void test_device_keeps_the_streamed_spine(void) {
    enum { STEPS = 4 };
    const int V = base.cat.cfg.vocab;
    float *want = calloc((size_t)STEPS * V, sizeof(float)), *got = calloc((size_t)STEPS * V, sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        Engine *e = &base, opened;
        if (pass) {
            EngineOptions o = fixture_options();
            o.store.kind = STORE_STREAM;
            o.store.populate = 0;
            o.store.ram_bytes = 300000000;
            install();
            CHECK_MSG(engine_open(&opened, dir, &o) == 0, "%s", df_errmsg());
            e = &opened;
            CHECK_MSG(e->spine_on_device && e->stream.plan.pinned == 0, "spine on the device %d, %d layers pinned",
                      e->spine_on_device, e->stream.plan.pinned);
            CHECK(devpass_spine_held(e->model) == e->cat.cfg.n_layers);
        }
        float *out = pass ? got : want;
        State *st = state_create(e->model);
        CHECK(model_forward(e->model, st, prompt, 5, out, 0) == 0);
        uint64_t before = pass ? stream_counters(&e->stream).spine_bytes : 0;
        for (int i = 1; i < STEPS; i++) {
            int tok = model_argmax(e->model, out + (size_t)(i - 1) * V);
            CHECK(model_forward(e->model, st, &tok, 1, out + (size_t)i * V, 0) == 0);
        }
        if (pass) {
            uint64_t after = stream_counters(&e->stream).spine_bytes;
            CHECK_MSG(after == before, "decode steps read %llu spine bytes", (unsigned long long)(after - before));
        }
        state_destroy(st);
        if (pass) engine_close(e), device_close();
    }
    CHECK_MSG(!memcmp(got, want, sizeof(float) * STEPS * (size_t)V), "logits differ from the CPU's");
    free(want), free(got);
}

int main(void) {
    if (fixture_open(&base, dir, 5)) return 1;
    RUN(test_layer_pass_is_the_cpu_pass);
    RUN(test_device_keeps_the_streamed_spine);
    fixture_close(&base, dir);
    return check_summary();
}

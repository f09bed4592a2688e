/* The layer pass (model/devpass.c) on a device whose whole-layer operations (kernels/devops.h)
 * compute on the CPU with the model's own functions, in the model's order: "device memory" is host
 * memory. The pass must then reproduce the CPU path bit for bit, which checks its schedule (every
 * step of every layer, in order, on the right buffers) and its State handling: decode steps on the
 * device interleaved with prefill chunks and speculative verification on the host, copies, saves
 * and comparisons of States whose latest values live on the device, for the mapped store and a
 * streamed spine with a small, constantly refilled expert cache. */
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
static int h_keep(MatDevice *d, const Mat *W) { return (void)d, n_kept++, holds_all || W->fmt != WF_MXFP4; }
static int h_holds(MatDevice *d, const Mat *W) { return (void)d, holds_all || W->fmt != WF_MXFP4; }
static void h_mul(MatDevice *d, float *Y, const Mat *W, const float *X) { (void)d, n_ops++, mat_mul_cpu(NULL, Y, W, X, 1); }
static void h_mul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X) {
    (void)d, mat_mul_heads_cpu(NULL, Y, W, hd, X, 1);
}
static void h_tmul_heads(MatDevice *d, float *Y, const Mat *W, const MatHeads *hd, const float *X) {
    (void)d, mat_tmul_heads_cpu(NULL, Y, W, hd, X, 1);
}

static void h_rmsnorm(MatDevice *d, float *out, const float *x, const float *w, int n, int rows, float eps, const float *gate) {
    (void)d;
    for (int r = 0; r < rows; r++) {
        op_rmsnorm(out + (size_t)r * n, x + (size_t)r * n, w, n, eps);
        for (int i = 0; gate && i < n; i++) out[(size_t)r * n + i] *= op_sigmoid(gate[(size_t)r * n + i]);
    }
}

static void h_attnres(MatDevice *d, float *out, const float *anchors, int n_anchors, const float *p, const float *q, int dim,
                      float eps, float *scores) {
    const float *values[K3_MAX_LAYERS + 2];
    (void)d, (void)scores;
    for (int a = 0; a < n_anchors; a++) values[a] = anchors + (size_t)a * dim;
    values[n_anchors] = p;
    op_attnres(out, values, n_anchors + 1, q, dim, eps);
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

/* kda.c's short_conv, normalisation, gate and delta_step for one position. */
static void h_kda(MatDevice *dv, const DevKda *a) {
    const int D = a->head_dim, K = a->kernel, W = a->heads * D;
    (void)dv;
    for (int s = 0; s < 3; s++)
        for (int c = 0; c < W; c++) {
            float *h = a->conv + ((size_t)s * W + c) * (size_t)(K - 1);
            const float *wc = a->conv_w[s] + (size_t)c * K;
            float cur = a->raw[s][c], acc = 0;
            for (int j = 0; j < K - 1; j++) acc += wc[j] * h[j];
            acc += wc[K - 1] * cur;
            a->qkv[s][c] = op_silu(acc);
            memmove(h, h + 1, sizeof *h * (size_t)(K - 2));
            h[K - 2] = cur;
        }
    for (int hd = 0; hd < a->heads; hd++) {
        float *q = a->qkv[0] + (size_t)hd * D, *k = a->qkv[1] + (size_t)hd * D, *v = a->qkv[2] + (size_t)hd * D;
        float *S = a->S + (size_t)hd * D * D, *o = a->o + (size_t)hd * D, *decay = a->decay + (size_t)hd * D, pred[1024];
        op_l2norm_scaled(q, D, 1.0f / sqrtf((float)D));
        op_l2norm_scaled(k, D, 1.0f);
        for (int j = 0; j < D; j++) {
            float rate = a->per_channel ? a->decay_rate[j] : a->decay_rate[hd];
            decay[j] = expf(a->gate_lower_bound * op_sigmoid(rate * (a->f[hd * D + j] + a->dt_bias[hd * D + j])));
        }
        float beta = op_sigmoid(a->beta_raw[hd]);
        for (int j = 0; j < D; j++) pred[j] = 0;
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) S[i * D + j] *= decay[i], pred[j] += k[i] * S[i * D + j];
        for (int j = 0; j < D; j++) pred[j] = beta * (v[j] - pred[j]), o[j] = 0;
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) S[i * D + j] += k[i] * pred[j], o[j] += q[i] * S[i * D + j];
    }
}

/* mla.c's mla_head_latent for one position. */
static void h_mla(MatDevice *d, const DevMla *a) {
    const int R = a->kv_lora, KVW = R + a->qk_rope, QK = a->qk_nope + a->qk_rope;
    (void)d;
    for (int h = 0; h < a->heads; h++) {
        float *score = a->scores + (size_t)h * a->n, *lctx = a->lctx + (size_t)h * R;
        const float *q = a->qf + (size_t)h * QK, *qlat = a->qlat + (size_t)h * R;
        for (int u = 0; u < a->n; u++) {
            const float *lat = a->latent + (size_t)u * KVW;
            score[u] = (op_dot(qlat, lat, R) + op_dot(q + a->qk_nope, lat + R, a->qk_rope)) * (1.0f / sqrtf((float)QK));
        }
        op_softmax(score, a->n);
        for (int i = 0; i < R; i++) lctx[i] = 0;
        for (int u = 0; u < a->n; u++) op_axpy(lctx, score[u], a->latent + (size_t)u * KVW, R);
    }
}

static void h_route(MatDevice *d, const float *logits, const float *bias, int ne, int k, int *ids, float *weights) {
    (void)d, moe_route(logits, bias, ne, k, ids, weights);
}

static void h_experts(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot, int n,
                      const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    (void)wait;
    for (int i = 0; i < n; i++) {
        const int inter = w1[i]->rows, latent = w1[i]->cols;
        mat_mul_cpu(NULL, h, w1[i], z, 1);
        mat_mul_cpu(NULL, h + inter, w3[i], z, 1);
        h_situ(d, h, h + inter, (size_t)inter, beta, beta_lin);
        mat_mul_cpu(NULL, out + (size_t)slot[i] * latent, w2[i], h, 1);
    }
}

static void h_combine(MatDevice *d, float *y, const float *eo, const float *w, int k, int n) {
    (void)d;
    for (int j = 0; j < n; j++) y[j] = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < n; j++) y[j] += w[i] * eo[(size_t)i * n + j];
}

static void h_mark(MatDevice *d, int phase) { (void)d, (void)phase; }
static void h_phase_times(MatDevice *d, double *secs) { (void)d, (void)secs; }
static void h_close(MatDevice *d) { (void)d; }

static const DevOps host_ops = {h_alloc, h_release, h_put, h_copy, h_get, h_keep, h_holds, h_mul, h_mul_heads, h_tmul_heads,
                                h_rmsnorm, h_attnres, h_add, h_gate, h_situ, h_kda, h_mla, h_route, h_experts,
                                h_combine, h_mark, h_phase_times};

static void cpu_mul(MatDevice *d, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    (void)d, mat_mul_cpu(pool, Y, W, X, T);
}
static void cpu_mul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_mul_heads_cpu(pool, Y, W, hd, X, T);
}
static void cpu_tmul_heads(MatDevice *d, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    (void)d, mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
}

static MatDevice host_dev;

static void install(void) {
    memset(&host_dev, 0, sizeof host_dev);
    snprintf(host_dev.desc, sizeof host_dev.desc, "host layers");
    host_dev.mul = cpu_mul, host_dev.mul_heads = cpu_mul_heads, host_dev.tmul_heads = cpu_tmul_heads;
    host_dev.close = h_close;
    host_dev.ops = &host_ops;
    CHECK(device_install(&host_dev) == 0);
}

static char dir[] = "/tmp/df-devpass-XXXXXX";
static Engine base; /* the fixture's model, mapped, on the CPU */
static const int prompt[] = {5, 17, 300, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3, 88, 21, 4, 250, 11};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0], ROWS = 1 + 6 + 3 + 3 + 3 + 3 + 2 };

typedef struct {
    Model *m;
    float *out;
    int row, V, rc;
} Script;

/* One greedy decode step of st from the last row's logits, the new logits appended. */
static void step(Script *s, State *st, const float *from) {
    int tok = model_argmax(s->m, from);
    if (!s->rc) s->rc = model_forward(s->m, st, &tok, 1, s->out + (size_t)s->row * s->V, 0);
    s->row++;
}

static const float *last(const Script *s) { return s->out + (size_t)(s->row - 1) * s->V; }

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

/* Prefill in chunks of 5, decode, snapshot (state_copy), decode, verify three rows and keep two,
 * decode, decode the snapshot, save and load it into a third State and decode that: ROWS rows of
 * logits into out; *equal: whether the loaded State equals the snapshot. */
static int script(Engine *e, float *out, int *equal) {
    Script s = {e->model, out, 0, e->cat.cfg.vocab, 0};
    State *st = state_create(s.m), *snap = state_create(s.m), *third = state_create(s.m);
    for (int at = 0; at < N_PROMPT && !s.rc; at += 5) s.rc = model_forward(s.m, st, prompt + at, 5, out, 0);
    s.row = 1;
    for (int i = 0; i < 6; i++) step(&s, st, last(&s));
    if (!s.rc) s.rc = state_copy(snap, st);
    const float *at_snap = last(&s);
    int snap_row = s.row - 1;
    for (int i = 0; i < 3; i++) step(&s, st, last(&s));
    int draft[3] = {model_argmax(s.m, last(&s)), 7, 9};
    float *verify = malloc(sizeof(float) * 3 * (size_t)s.V);
    if (!s.rc) s.rc = model_forward_verify(s.m, st, draft, 3, verify);
    state_commit(st, 2);
    memcpy(out + (size_t)s.row++ * s.V, verify + s.V, sizeof(float) * (size_t)s.V); /* the kept row's logits */
    free(verify);
    for (int i = 0; i < 2; i++) step(&s, st, last(&s));
    step(&s, snap, at_snap);
    for (int i = 0; i < 2; i++) step(&s, snap, last(&s));
    (void)snap_row;
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
    return s.rc;
}

static void run_layout(const char *what, EngineOptions o, const float *want) {
    Engine e;
    install();
    n_ops = n_kept = n_gets = 0;
    CHECK_MSG(engine_open(&e, dir, &o) == 0, "%s: %s", what, df_errmsg());
    CHECK_MSG(e.model->dev != NULL, "%s: the layer pass was not set up", what);
    const size_t n = (size_t)ROWS * (size_t)e.cat.cfg.vocab;
    float *got = calloc(n, sizeof(float));
    int equal = 0;
    CHECK_MSG(script(&e, got, &equal) == 0, "%s: %s", what, df_errmsg());
    CHECK_MSG(!memcmp(got, want, n * sizeof(float)), "%s: logits differ from the CPU's", what);
    CHECK_MSG(equal, "%s: a State saved from the device and loaded differs", what);
    CHECK_MSG(n_ops > 0 && n_gets > 0, "%s: no decode step ran on the device (%ld products)", what, n_ops);
    const ModelStats *ms = model_stats(e.model);
    const int cpu = ms->experts_cpu > 0, copied = ms->experts_copied > 0;
    if (holds_all) CHECK_MSG(!cpu && !copied, "%s: experts ran the host way although the device holds them", what);
    else if (o.host_experts == HOST_EXPERTS_CPU) CHECK_MSG(cpu && !copied, "%s: %d %d", what, cpu, copied);
    else if (o.host_experts == HOST_EXPERTS_COPY) CHECK_MSG(!cpu && copied, "%s: %d %d", what, cpu, copied);
    else CHECK_MSG(cpu && copied, "%s: both ways are measured: %d %d", what, cpu, copied);
    engine_close(&e);
    device_close();
    free(got);
}

static void test_layer_pass_is_the_cpu_pass(void) {
    const size_t n = (size_t)ROWS * (size_t)base.cat.cfg.vocab;
    float *want = calloc(n, sizeof(float));
    int equal = 0;
    CHECK(script(&base, want, &equal) == 0);
    CHECK(equal);
    EngineOptions o = fixture_options();
    run_layout("mapped", o, want);
    CHECK_MSG(n_kept > 0, "mapped: nothing was made resident");
    o.store.kind = STORE_STREAM;
    o.store.populate = 0;
    o.store.pin_layers = 1;
    o.store.ram_bytes = 300000000;
    run_layout("streamed spine and experts", o, want);
    /* experts the device does not hold: on the CPU threads, copied, or as measured */
    holds_all = 0;
    const HostExperts ways[] = {HOST_EXPERTS_CPU, HOST_EXPERTS_COPY, HOST_EXPERTS_AUTO};
    const char *names[] = {"experts on the CPU", "experts copied", "experts either way, as measured"};
    for (int i = 0; i < 3; i++) {
        o = fixture_options();
        o.host_experts = ways[i];
        run_layout(names[i], o, want);
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
    free(want);
}

int main(void) {
    if (fixture_open(&base, dir, 5)) return 1;
    RUN(test_layer_pass_is_the_cpu_pass);
    fixture_close(&base, dir);
    return check_summary();
}

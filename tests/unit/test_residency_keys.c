/* Residency keys name bytes (kernels/mat.h): a device may keep a copy of a weight under its key, so
 * a key that comes back with the same generation must hold the same bytes, whatever the store did
 * with its buffers since. Checked by a device that computes on the CPU kernels and remembers a
 * checksum per key: every store layout of a tiny synth model (mapped; streamed with spine layers
 * read into the two stream buffers over and over and an expert cache small enough to be refilled
 * all the time), several forwards each, and the logits stay those of the CPU. The generation must
 * also move on where bytes change (refilled slots), and stay where they do not (a spine tensor read
 * again, into either stream buffer). */
#include <string.h>

#include "check.h"
#include "kernels/device.h"
#include "model_fixture.h"

typedef struct {
    MatKey key;
    uint64_t sum;
} Seen;

typedef struct {
    MatDevice base;          /* first member */
    Seen *seen;              /* one entry per (store, part, item): the last generation and its bytes */
    int n, cap;
    long stale;              /* same key and generation, other bytes */
    long renewed[2];         /* same item, new generation: [0] spine tensors, [1] experts */
    long kept;               /* same key and bytes: a copy kept under the key would have served */
    long keyless;
} CheckDevice;

static uint64_t fnv(uint64_t h, const void *p, uint64_t n) {
    const uint8_t *b = p;
    for (uint64_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A checksum of the matrix's bytes: its data and, where the format has one, its aux array. */
static uint64_t mat_sum(const Mat *W) {
    uint64_t n = (uint64_t)W->rows * (uint64_t)W->cols, data = mat_bytes(W), aux = 0;
    if (W->fmt == WF_MXFP4) data = n / 2, aux = n / 32;
    if (W->fmt == WF_I8ROW) data = n, aux = 4 * (uint64_t)W->rows;
    uint64_t h = fnv(0xcbf29ce484222325ull, W->data, data);
    return aux ? fnv(h, W->aux, aux) : h;
}

static void note(CheckDevice *d, const Mat *W) {
    if (!W->key.store) {
        d->keyless++;
        return;
    }
    uint64_t sum = mat_sum(W);
    for (int i = 0; i < d->n; i++) {
        Seen *s = &d->seen[i];
        if (s->key.store != W->key.store || s->key.part != W->key.part || s->key.item != W->key.item) continue;
        if (s->key.gen != W->key.gen) d->renewed[W->fmt == WF_MXFP4]++;
        else if (s->sum != sum) d->stale++;
        else d->kept++;
        s->key = W->key, s->sum = sum;
        return;
    }
    if (d->n == d->cap) d->cap = d->cap ? 2 * d->cap : 256, d->seen = realloc(d->seen, sizeof *d->seen * (size_t)d->cap);
    d->seen[d->n++] = (Seen){W->key, sum};
}

static void check_mul(MatDevice *b, Pool *pool, float *Y, const Mat *W, const float *X, int T) {
    note((CheckDevice *)b, W);
    mat_mul_cpu(pool, Y, W, X, T);
}

static void check_mul_heads(MatDevice *b, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X, int T) {
    note((CheckDevice *)b, W);
    mat_mul_heads_cpu(pool, Y, W, hd, X, T);
}

static void check_tmul_heads(MatDevice *b, Pool *pool, float *Y, const Mat *W, const MatHeads *hd, const float *X,
                             int T) {
    note((CheckDevice *)b, W);
    mat_tmul_heads_cpu(pool, Y, W, hd, X, T);
}

static void check_close(MatDevice *b) {
    CheckDevice *d = (CheckDevice *)b;
    free(d->seen);
    memset(d, 0, sizeof *d);
}

static CheckDevice dev;

static void install(void) {
    memset(&dev, 0, sizeof dev);
    snprintf(dev.base.desc, sizeof dev.base.desc, "residency check");
    dev.base.mul = check_mul, dev.base.mul_heads = check_mul_heads, dev.base.tmul_heads = check_tmul_heads;
    dev.base.close = check_close;
    CHECK(device_install(&dev.base) == 0);
}

static char dir[] = "/tmp/df-residency-XXXXXX";
static Engine *base; /* the fixture's model, mapped, on the CPU */
static const int prompt[] = {5, 17, 300, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3, 88, 21, 4, 250, 11};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0], N_DECODE = 12 };

/* Feeds the prompt in chunks of 5, then decodes greedily; the logits of every step go to out
 * (N_DECODE + 1 rows of vocab). Returns 0 or -1. */
static int generate(Engine *e, float *out) {
    State *st = state_create(e->model);
    const int V = e->cat.cfg.vocab;
    int rc = 0;
    for (int at = 0; at < N_PROMPT && !rc; at += 5) rc = model_forward(e->model, st, prompt + at, 5, out, 0);
    for (int i = 0; i < N_DECODE && !rc; i++) {
        int tok = model_argmax(e->model, out + (size_t)i * V);
        rc = model_forward(e->model, st, &tok, 1, out + (size_t)(i + 1) * V, 0);
    }
    state_destroy(st);
    return rc;
}

/* The smallest budget that plans `pin` pinned layers with the fewest expert slots, plus `extra`
 * slots, read from the plan of a generous budget. */
static uint64_t tight_budget(EngineOptions o, int extra) {
    Engine *e;
    o.store.ram_bytes = 4000000000ull;
    if (!(e = engine_open(dir, &o))) return 0;
    const StreamPlan *p = &e->stream.plan;
    const K3Config *c = &e->cat.cfg;
    uint64_t need = p->fixed + p->globals + p->pinned_bytes + 2 * p->stream_buf +
                    (uint64_t)(2 * c->top_k + extra) * p->slot_bytes;
    engine_close(e);
    return need;
}

/* Opens the model with o under the checking device, generates, and compares with want; renewed:
 * the generations that moved on, spine and experts. */
static void run_layout(const char *what, EngineOptions o, const float *want, long renewed[2]) {
    Engine *e;
    install();
    CHECK_MSG((e = engine_open(dir, &o)) != NULL, "%s: %s", what, df_errmsg());
    const int V = e->cat.cfg.vocab;
    float *got = malloc(sizeof(float) * (size_t)(N_DECODE + 1) * (size_t)V);
    CHECK_MSG(generate(e, got) == 0, "%s: %s", what, df_errmsg());
    CHECK_MSG(!memcmp(got, want, sizeof(float) * (size_t)(N_DECODE + 1) * (size_t)V), "%s: logits differ from the CPU's",
              what);
    CHECK_MSG(dev.stale == 0, "%s: %ld products saw a key again with other bytes behind it", what, dev.stale);
    CHECK_MSG(dev.kept > 0, "%s: no key ever came back unchanged", what);
    CHECK_MSG(dev.keyless == 0, "%s: %ld products of matrices without a key", what, dev.keyless);
    renewed[0] = dev.renewed[0], renewed[1] = dev.renewed[1];
    engine_close(e);
    device_close(); /* installed here, closed here: the engine shared it */
    free(got);
}

static void test_keys_name_bytes(void) {
    EngineOptions o = fixture_options();
    o.store.populate = 0; /* the arenas below are large: touch only what is read */
    const size_t rows = (size_t)(N_DECODE + 1) * (size_t)base->cat.cfg.vocab;
    const K3Config *c = &base->cat.cfg;
    int layers = c->n_layers, experts = (c->n_layers - c->first_dense) * c->n_experts;
    float *want = malloc(sizeof(float) * rows);
    CHECK(generate(base, want) == 0);

    long renewed[2];
    run_layout("mapped", o, want, renewed);
    CHECK_MSG(!renewed[0] && !renewed[1], "mapped: %ld + %ld generations moved on, but nothing changes", renewed[0],
              renewed[1]);

    o.store.kind = STORE_STREAM;
    o.store.pin_layers = layers; /* every spine layer resident, a cache for every expert */
    o.store.ram_bytes = 2000000000;
    run_layout("streamed experts, roomy cache", o, want, renewed);
    CHECK_MSG(!renewed[0] && !renewed[1], "roomy cache: %ld + %ld generations moved on, but nothing was reread",
              renewed[0], renewed[1]);
    o.store.pin_layers = 1;
    o.store.ram_bytes = tight_budget(o, 1);
    CHECK(o.store.ram_bytes > 0);
    run_layout("streamed spine, small cache", o, want, renewed);
    /* every forward reads the streamed layers again, into either buffer, but a tensor's bytes never
     * change: their keys stay; the cache of 2 top-k + 1 slots refills (new generations) */
    CHECK_MSG(renewed[0] == 0, "streamed spine: %ld generations of unchanged tensors moved on", renewed[0]);
    CHECK_MSG(2 * c->top_k + 1 < experts, "the cache holds every expert: nothing is refilled");
    CHECK_MSG(renewed[1] > 0, "small cache: no slot was refilled");
    free(want);
}

int main(void) {
    if (!(base = fixture_open(dir, 3))) return 1;
    RUN(test_keys_name_bytes);
    fixture_close(base, dir);
    return check_summary();
}

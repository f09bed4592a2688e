/* k3.c - one forward pass through the whole model, top to bottom (docs/MODEL.md 4.1): embed; per
 * layer { AttnRes -> attention (KDA or MLA), AttnRes -> FFN (dense or MoE) }; the head.
 *
 * This is the only schedule. Its steps are the operations of kernels/devops.h on the model's device
 * (m->dev): the CPU device (host memory, the compute pool) or an accelerator (model_use_device). A
 * pass holds T rows of one or more sequences (a decode step, a prefill chunk, a verify pass, the
 * server's batches); everything but the attention's state runs on all the rows at once, and the KDA
 * recurrence and the MLA cache run sequence by sequence on their own rows (kda.c, mla.c). The FFN
 * and the routed experts are in ffn.c and experts.c; the device's memory in devmem.c.
 *
 * What goes up per pass: the tokens' embedding rows (and, per MoE layer of a chunk, where each row's
 * inputs go among its experts'). What comes back: each MoE layer's routing (the expert source must
 * see the selections, and acquire the experts), and the logits. A spine layer the device holds is
 * not acquired (a streamed one is not read again).
 *
 * Speculation. A verify pass keeps its replay records with the State's device copy (per KDA layer:
 * the matrices and conv windows before the pass and each row's conv inputs, decay-gate and beta
 * pre-activations), and state_commit of n rows replays the first n rows there with the same
 * operation (kda_commit): a verify pass moves no state between host and device. The MLA rows past
 * the kept ones are dropped by the State's length. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_device.h"
#include "kernels/mat.h"
#include "kernels/vecops.h"
#include "model/internal.h"
#include "util/clock.h"
#include "util/err.h"

int model_context(const K3Config *c, int asked) {
    if (asked < 1) asked = 1;
    return (int64_t)asked > c->max_positions ? (int)c->max_positions : asked;
}

int model_window(const K3Config *c, int max_context, int max_rows) {
    int context = model_context(c, max_context), rows = max_rows > 0 ? max_rows : MODEL_BATCH_ROWS;
    if (rows > MODEL_MAX_WINDOW) rows = MODEL_MAX_WINDOW;
    return rows < context ? rows : context;
}

ModelMemory model_memory(const K3Config *c, MlaCacheMode mla, int max_context, int max_rows) {
    int context = model_context(c, max_context), rows = model_window(c, max_context, max_rows);
    const uint64_t undo = sizeof(float) * (uint64_t)kda_floats(c) * (uint64_t)c->n_kda_layers; /* a stoppable window's */
    ModelMemory mm = {sizeof(Model) + scratch_bytes(c, rows, 0) + undo, scratch_bytes(c, rows, 1) - scratch_bytes(c, rows, 0),
                      devmem_scratch_bytes(c, mla, context, rows), state_bytes(c, mla, context), state_verify_bytes(c)};
    return mm;
}

uint64_t model_row_bytes(const K3Config *c, MlaCacheMode mla, int hybrid) {
    enum { A = 1024, B = 2048 }; /* (both inside any context: the difference is per row) */
    const ModelMemory a = model_memory(c, mla, B, A), b = model_memory(c, mla, B, B);
    return (b.model + b.scratch + (hybrid ? b.hybrid : 0) - a.model - a.scratch - (hybrid ? a.hybrid : 0)) / (B - A);
}

int model_create(Model **out, const Catalog *cat, SpineSource *spine, ExpertSource *experts, Pool *pool, ALogMode mode,
                 int max_context, MlaCacheMode mla, int max_rows) {
    Model *m = df_calloc(1, sizeof *m);
    m->cfg = cat->cfg;
    m->cat = cat;
    m->spine = spine;
    m->experts = experts;
    m->pool = pool;
    m->look_layer = -1;
    m->mla_cache = mla;
    m->max_context = model_context(&m->cfg, max_context);
    m->max_rows = model_window(&m->cfg, max_context, max_rows);
    if (weights_bind(&m->w, cat, spine, mode)) {
        free(m);
        return -1;
    }
    scratch_alloc(&m->s, &m->cfg, m->max_rows, 0);
    m->cpu = cpu_device_create(pool, CPU_PRODUCTS_PROCESS);
    if (devmem_open(m, m->cpu, HOST_EXPERTS_COPY, POLICY_CRF)) return model_destroy(m), -1;
    *out = m;
    return 0;
}

void model_destroy(Model *m) {
    if (!m) return;
    devmem_close(m);
    cpu_device_destroy(m->cpu);
    cpu_device_destroy(m->helper);
    weights_free(&m->w, &m->cfg);
    scratch_free(&m->s, &m->cfg);
    free(m->undo);
    free(m);
}

const K3Config *model_config(const Model *m) { return &m->cfg; }
int model_max_context(const Model *m) { return m->max_context; }
int model_max_rows(const Model *m) { return m->max_rows; }
ModelStats *model_stats(Model *m) { return &m->stats; }
MlaCacheMode model_mla_cache(const Model *m) { return m->mla_cache; }

/* x = AttnRes over (anchors, P) with query q for rows [row0, row0 + T) (x from its row 0); with no
 * anchors, x = P. */
static void attn_res(Model *m, int n_anchors, const float *q, int row0, int T, float *x) {
    DevModel *g = m->dev;
    const size_t H = (size_t)m->cfg.hidden;
    const float *P = g->P + (size_t)row0 * H;
    if (n_anchors == 0) g->ops->copy(g->dev, x, P, (size_t)T * H * sizeof(float));
    else
        g->ops->attnres(g->dev, x, g->anchors + (size_t)row0 * H, n_anchors, (size_t)g->rows * H, P, q, (int)H, T,
                        m->cfg.rms_eps, g->res_scores);
}

/* The part of each sequence that falls in the pass's rows [g0, g0 + n) (rows counted from g0) into
 * part; returns how many sequences have rows there. */
static int seqs_in_group(const Seq *seqs, int n_seqs, int g0, int n, Seq *part) {
    int k = 0;
    for (int q = 0; q < n_seqs; q++) {
        const int a = seqs[q].row0 > g0 ? seqs[q].row0 : g0, b = seqs[q].row0 + seqs[q].rows < g0 + n ? seqs[q].row0 + seqs[q].rows : g0 + n;
        if (a < b) part[k++] = (Seq){seqs[q].st, a - g0, b - a, seqs[q].pos + (a - seqs[q].row0)};
    }
    return k;
}

/* The attention half of layer l, in groups of the device's attn_rows rows (the KDA recurrence and
 * the MLA cache advance group after group, as row after row); returns the anchor count after it. At
 * a block boundary the finished block's sum becomes a new anchor and P restarts from the
 * attention's output. */
static int attention_block(Model *m, const Seq *seqs, int n_seqs, int l, int n_anchors, int T) {
    DevModel *g = m->dev;
    const DevLayer *D = &g->layers[l];
    const size_t H = (size_t)m->cfg.hidden;
    const int boundary = l % m->cfg.attn_res_block == 0;
    g->ops->mark(g->dev, DEV_PHASE_ATTENTION);
    for (int g0 = 0, n; g0 < T; g0 += n) {
        Seq part[MODEL_BATCH_ROWS];
        n = T - g0 < g->attn_rows ? T - g0 : g->attn_rows;
        const int n_part = seqs_in_group(seqs, n_seqs, g0, n, part);
        float *P = g->P + (size_t)g0 * H;
        attn_res(m, n_anchors, D->attn_res_q, g0, n, g->xn);
        if (boundary) g->ops->copy(g->dev, g->anchors + ((size_t)n_anchors * (size_t)g->rows + (size_t)g0) * H, P, (size_t)n * H * sizeof(float));
        g->ops->rmsnorm(g->dev, g->xn, g->xn, D->attn_norm, (int)H, n, H, m->cfg.rms_eps, NULL);
        if (m->w.layers[l].kind == LAYER_MLA) mla_attention(m, l, part, n_part, n);
        else kda_attention(m, l, part, n_part, n);
        if (boundary) g->ops->copy(g->dev, P, g->attn_out, (size_t)n * H * sizeof(float));
        else g->ops->add(g->dev, P, g->attn_out, (size_t)n * H);
    }
    return n_anchors + boundary;
}

static int ffn_block(Model *m, int l, int n_anchors, int T) {
    DevModel *g = m->dev;
    const size_t H = (size_t)m->cfg.hidden;
    g->ops->mark(g->dev, DEV_PHASE_FFN);
    attn_res(m, n_anchors, g->layers[l].ffn_res_q, 0, T, g->x);
    g->ops->rmsnorm(g->dev, g->x, g->x, g->layers[l].ffn_norm, (int)H, T, H, m->cfg.rms_eps, NULL);
    if (ffn_forward(m, l, T)) return -1;
    g->ops->add(g->dev, g->P, g->ffn_out, H * (size_t)T);
    return 0;
}

/* The head for rows out_rows[0..n_out) of the pass (n_out <= the device's logit_rows): final
 * AttnRes, norm and lm_head, into the device's logits. Consecutive rows run on their own; others
 * (the last row of each of several sequences) take the tail of every row, then the asked-for rows
 * gathered. */
static void head(Model *m, int n_anchors, int T, const int *out_rows, int n_out) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    int consecutive = 1;
    for (int i = 1; i < n_out; i++) consecutive &= out_rows[i] == out_rows[0] + i;
    g->ops->mark(g->dev, DEV_PHASE_HEAD);
    if (consecutive) { /* each row's tail is its own */
        attn_res(m, n_anchors, g->out_res_q, out_rows[0], n_out, g->x);
        g->ops->rmsnorm(g->dev, g->x, g->x, g->final_norm, c->hidden, n_out, H, c->rms_eps, NULL);
        g->ops->mul(g->dev, g->logits, &m->w.lm_head, g->x, n_out);
        return;
    }
    attn_res(m, n_anchors, g->out_res_q, 0, T, g->x);
    g->ops->rmsnorm(g->dev, g->x, g->x, g->final_norm, c->hidden, T, H, c->rms_eps, NULL);
    g->ops->put(g->dev, g->gather_idx, out_rows, sizeof(int) * (size_t)n_out);
    g->ops->gather(g->dev, g->xn, g->x, g->gather_idx, n_out, c->hidden);
    g->ops->mul(g->dev, g->logits, &m->w.lm_head, g->xn, n_out);
}

/* The logits of rows out_rows[0..n_out) into logits ([n_out][vocab]), the head run in groups of the
 * device's logit_rows, each brought back; the last group's copy is the pass's end (the caller's
 * get). Returns 0, or -1 with the device's fault. */
static int head_groups(Model *m, int n_anchors, int T, const int *out_rows, int n_out, float *logits, int *last_group) {
    DevModel *g = m->dev;
    const size_t V = (size_t)m->cfg.vocab;
    int at = 0;
    for (; n_out - at > g->logit_rows; at += g->logit_rows) {
        head(m, n_anchors, T, out_rows + at, g->logit_rows);
        if (g->ops->get(g->dev, logits + (size_t)at * V, g->logits, sizeof(float) * (size_t)g->logit_rows * V)) return -1;
    }
    head(m, n_anchors, T, out_rows + at, n_out - at);
    *last_group = at;
    return 0;
}

static int check_logits(const Model *m, const float *logits, const int *rows, int n) {
    const int V = m->cfg.vocab;
    for (size_t i = 0; i < (size_t)n * V; i++)
        if (!isfinite(logits[i]))
            return df_fail("non-finite logit at position %d, token %zu: the weights hold NaN/Inf values", rows[i / V],
                           i % V);
    return 0;
}

static int check_tokens(const Model *m, const int *tokens, int T) {
    if (T < 1 || T > m->max_rows) return df_fail("forward: a pass of %d positions (1..%d allowed)", T, m->max_rows);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->cfg.vocab)
            return df_fail("token id %d is outside the vocabulary (0..%d)", tokens[t], m->cfg.vocab - 1);
    return 0;
}

/* A pass's use of layer l: acquired (1: leave_layer releases it), or not acquired because the
 * device holds every matrix of it (0); -1 on failure. */
static int enter_layer(Model *m, int l) {
    if (devmem_layer_held(m, l)) return 0;
    return model_acquire_layer(m, l) ? -1 : 1;
}

static void leave_layer(Model *m, int l, int entered) {
    if (entered > 0 && m->spine->release_layer) m->spine->release_layer(m->spine, l);
}

/* The device's phases of the pass into the model's stats. */
static void add_phase_times(Model *m) {
    double secs[DEV_N_PHASES] = {0};
    m->dev->ops->phase_times(m->dev->dev, secs);
    m->stats.attention_s += secs[DEV_PHASE_ATTENTION];
    m->stats.ffn_s += secs[DEV_PHASE_FFN] + secs[DEV_PHASE_EXPERTS];
    m->stats.experts_s += secs[DEV_PHASE_EXPERTS];
    m->stats.head_s += secs[DEV_PHASE_HEAD];
}

/* The pass itself: tokens[0..T) split into seqs, every layer, the states advanced; logits: NULL, or
 * [n_out][vocab] for rows out_rows[0..n_out). The caller checked the arguments and reserved the
 * states' room. Decode steps (one row of one sequence, every spine weight on the device) are
 * recorded stretch by stretch (devops.h record): such steps repeat the same launches token after
 * token, so a device with graphs replays each stretch instead of launching its kernels one by one. */
/* A stoppable forward (model_watch_layers) keeps its sequence's KDA states aside: 1 when kept, 0
 * when the forward cannot stop (an accelerator's, several sequences, a recorded step, or no
 * memory for the copy: it then completes). */
static int keep_kda_states(Model *m, const Seq *seqs, int n_seqs) {
    const K3Config *c = &m->cfg;
    if (!m->watch || !m->dev->host || n_seqs != 1 || m->dev->recordable || m->verifying) return 0;
    if (!m->undo && !(m->undo = malloc(sizeof(float) * kda_floats(c) * (size_t)c->n_kda_layers))) return 0;
    for (int l = 0, k = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == LAYER_KDA)
            memcpy(m->undo + kda_floats(c) * (size_t)k++, seqs[0].st->layers[l].kda, sizeof(float) * kda_floats(c));
    return 1;
}

/* A stopped forward: the KDA states of the layers it passed (0..last) put back. */
static void restore_kda_states(Model *m, State *st, int last) {
    const K3Config *c = &m->cfg;
    for (int l = 0, k = 0; l <= last; l++)
        if (c->layer_kind[l] == LAYER_KDA)
            memcpy(st->layers[l].kda, m->undo + kda_floats(c) * (size_t)k++, sizeof(float) * kda_floats(c));
}

static int forward_rows(Model *m, const Seq *seqs, int n_seqs, const int *tokens, int T, const int *out_rows, int n_out,
                        float *logits) {
    DevModel *g = m->dev;
    const K3Config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    for (int q = 0, row = 0; q < n_seqs; row += seqs[q++].rows) /* the sequences' rows tile the pass */
        DF_INVARIANT(seqs[q].row0 == row && seqs[q].rows >= 1 && row + seqs[q].rows <= T && (q < n_seqs - 1 || row + seqs[q].rows == T),
                     "sequence %d of %d: rows [%d, %d) in a pass of %d", q, n_seqs, seqs[q].row0, seqs[q].row0 + seqs[q].rows, T);
    for (int q = 0; q < n_seqs; q++) {
        State *st = seqs[q].st;
        if (devmem_state_up(m, st, seqs[q].rows)) return -1;
        st->dev_newer = !g->host; /* from here on the device's copy is the State */
    }
    mat_gather_rows(&m->w.embed, tokens, T, m->s.P);
    g->ops->put(g->dev, g->P, m->s.P, sizeof(float) * H * (size_t)T);
    g->recordable = g->whole_spine && T == 1 && n_seqs == 1 && !m->verifying;
    g->n_recorded = 0;
    record_stretch(m); /* up to the first MoE layer's routing */
    m->look_layer = -1;
    m->chunk_pos = seqs[0].st->len; /* trace replay (benchmark only) follows the first sequence */
    int n_anchors = 0;
    const int stoppable = keep_kda_states(m, seqs, n_seqs);
    for (int l = 0; l < c->n_layers; l++) {
        const int entered = enter_layer(m, l);
        if (entered < 0) return g->ops->get(g->dev, NULL, NULL, 0), -1; /* (ends a recording) */
        n_anchors = attention_block(m, seqs, n_seqs, l, n_anchors, T);
        int rc = ffn_block(m, l, n_anchors, T);
        leave_layer(m, l, entered);
        if (rc) return -1;
        if (m->watch && l < c->n_layers - 1 && m->watch(m->watch_ctx, l, c->n_layers) && stoppable) {
            restore_kda_states(m, seqs[0].st, l);
            m->stats.stopped++;
            g->ops->mark(g->dev, DEV_PHASE_IDLE);
            return MODEL_STOPPED;
        }
    }
    for (int q = 0; q < n_seqs; q++) seqs[q].st->len += seqs[q].rows;
    m->stats.positions += (uint64_t)T;
    m->stats.forwards++;
    m->stats.dev_forwards += !g->host;
    int last = 0, rc = logits ? head_groups(m, n_anchors, T, out_rows, n_out, logits, &last) : 0;
    g->ops->mark(g->dev, DEV_PHASE_IDLE);
    const size_t V = (size_t)c->vocab;
    rc |= g->ops->get(g->dev, logits ? logits + (size_t)last * V : NULL, g->logits,
                      logits ? sizeof(float) * (size_t)(n_out - last) * V : 0);
    add_phase_times(m);
    const char *fault = device_fault(); /* a device that failed computed zeros: the forward fails */
    if (fault) return df_fail("%s", fault);
    if (rc || !logits) return rc ? -1 : 0;
    return check_logits(m, logits, out_rows, n_out);
}

int model_forward(Model *m, State *st, const int *tokens, int T, float *logits, int all_rows) {
    if (check_tokens(m, tokens, T) || state_reserve(st, st->len + T)) return -1;
    st->verify_rows = 0;
    Seq seq = {st, 0, T, st->len};
    int *rows = m->s.out_rows;
    for (int t = 0; t < T; t++) rows[t] = all_rows ? t : T - 1;
    return forward_rows(m, &seq, 1, tokens, T, rows, all_rows ? T : 1, logits);
}

int model_forward_batch(Model *m, State *const *states, const int *tokens, const int *rows_per_state, int n,
                        float *logits, int all_rows) {
    Seq seqs[MODEL_BATCH_ROWS];
    int *out = m->s.out_rows, T = 0, n_out = 0;
    if (n < 1 || n > MODEL_BATCH_ROWS) return df_fail("forward: %d sequences in one pass (1..%d allowed)", n, MODEL_BATCH_ROWS);
    for (int q = 0; q < n; q++) {
        int r = rows_per_state[q];
        if (r < 1 || T + r > m->max_rows)
            return df_fail("forward: %d rows for sequence %d (1 or more, %d in all at most)", r, q, m->max_rows);
        for (int p = 0; p < q; p++)
            if (states[p] == states[q]) return df_fail("forward: sequence %d is given twice in one pass", q);
        seqs[q] = (Seq){states[q], T, r, states[q]->len};
        T += r;
        for (int t = all_rows ? seqs[q].row0 : T - 1; t < T; t++) out[n_out++] = t;
    }
    if (check_tokens(m, tokens, T)) return -1;
    for (int q = 0; q < n; q++)
        if (state_reserve(states[q], states[q]->len + seqs[q].rows)) return -1;
    for (int q = 0; q < n; q++) states[q]->verify_rows = 0;
    return forward_rows(m, seqs, n, tokens, T, out, n_out, logits);
}

int model_forward_verify(Model *m, State *st, const int *tokens, int T, float *logits) {
    if (T > MODEL_MAX_VERIFY) return df_fail("verify: %d rows (at most %d)", T, MODEL_MAX_VERIFY);
    if (check_tokens(m, tokens, T) || state_reserve(st, st->len + T) || devmem_state_up(m, st, T) ||
        !devmem_records(m, st))
        return -1;
    m->verifying = 1;
    int rc = model_forward(m, st, tokens, T, logits, 1);
    m->verifying = 0;
    if (!rc) st->verify_rows = T;
    return rc;
}

void model_watch_layers(Model *m, int (*fn)(void *ctx, int layer, int n_layers), void *ctx) {
    m->watch = fn;
    m->watch_ctx = fn ? ctx : NULL;
}

int model_argmax(const Model *m, const float *logits) { return op_argmax(logits, m->cfg.vocab); }

uint64_t model_mla_bytes_per_position(const K3Config *c, MlaCacheMode mode) {
    return state_bytes(c, mode, 1) - state_bytes(c, mode, 0);
}

/* cpu_attention.c - the CPU device's attention operations (devops.h): the KDA convolution and
 * delta-rule recurrence, MLA latent attention, and MLA over the expanded cache. Heads are
 * independent, so each head is one pool task and the results do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "format/config.h"
#include "kernels/cpu/cpu_int.h"
#include "kernels/vecops.h"

/* ---- KDA (docs/MODEL.md 4.3) ---- */

/* Causal depthwise conv + SiLU over `rows` positions for one stream, advancing its window.
 * hist: [width][K-1] previous raw inputs (oldest first); x: [rows][width] raw; y: [rows][width]. */
static void short_conv(const float *w, float *hist, const float *x, float *y, int rows, int width, int K) {
    for (int c = 0; c < width; c++) {
        float *h = hist + (size_t)c * (K - 1);
        const float *wc = w + (size_t)c * K;
        for (int t = 0; t < rows; t++) {
            float cur = x[(size_t)t * width + c], acc = 0;
            for (int j = 0; j < K - 1; j++) acc += wc[j] * h[j];
            acc += wc[K - 1] * cur;
            y[(size_t)t * width + c] = op_silu(acc);
            if (K > 1) {
                memmove(h, h + 1, sizeof *h * (size_t)(K - 2));
                h[K - 2] = cur;
            }
        }
    }
}

/* One delta-rule step for one head: decay S along the key axis, correct it toward v, read with q. */
static void delta_step(float *S, const float *q, const float *k, const float *v, const float *decay, float beta,
                       float *o, int D) {
    float pred[K3_MAX_KDA_HEAD_DIM];
    for (int j = 0; j < D; j++) pred[j] = 0;
    for (int i = 0; i < D; i++) {
        float *row = S + (size_t)i * D;
        for (int j = 0; j < D; j++) row[j] *= decay[i];
        for (int j = 0; j < D; j++) pred[j] += k[i] * row[j];
    }
    for (int j = 0; j < D; j++) pred[j] = beta * (v[j] - pred[j]);
    for (int j = 0; j < D; j++) o[j] = 0;
    for (int i = 0; i < D; i++) {
        float *row = S + (size_t)i * D;
        for (int j = 0; j < D; j++) row[j] += k[i] * pred[j];
        for (int j = 0; j < D; j++) o[j] += q[i] * row[j];
    }
}

/* Task h: head h over the rows in order: q and k normalised, the decay gate and beta, the step. */
static void kda_head(void *ctx, int h) {
    const DevKda *a = ctx;
    const int D = a->head_dim, W = a->heads * D;
    float *S = a->S + (size_t)h * D * D;
    for (int t = 0; t < a->rows; t++) {
        const size_t row = (size_t)t * W + (size_t)h * D;
        float *q = a->qkv[0] + row, *k = a->qkv[1] + row, *v = a->qkv[2] + row, *decay = a->decay + row;
        op_l2norm_scaled(q, D, 1.0f / sqrtf((float)D));
        op_l2norm_scaled(k, D, 1.0f);
        for (int d = 0; d < D; d++) {
            float rate = a->per_channel ? a->decay_rate[d] : a->decay_rate[h];
            float g = a->gate_lower_bound * op_sigmoid(rate * (a->f[row + d] + a->dt_bias[h * D + d]));
            decay[d] = expf(g);
        }
        float beta = op_sigmoid(a->beta_raw[(size_t)t * a->heads + h]);
        a->beta[(size_t)t * a->heads + h] = beta;
        delta_step(S, q, k, v, decay, beta, a->o + row, D);
    }
}

void cpu_op_kda(MatDevice *d, const DevKda *a) {
    const int W = a->heads * a->head_dim, K = a->kernel;
    for (int i = 0; i < 3; i++)
        short_conv(a->conv_w[i], a->conv + (size_t)i * W * (K - 1), a->raw[i], a->qkv[i], a->rows, W, K);
    pool_run(cpu_of(d)->pool, a->heads, kda_head, (void *)a);
}

/* ---- MLA, latent cache (docs/MODEL.md 4.4, 5.1) ---- */

/* Task h: head h's rows, causal: scores of its absorbed query against the cached latents and k_pe,
 * softmax, and the attended latent. */
static void mla_head(void *ctx, int h) {
    const DevMla *a = ctx;
    const int NH = a->heads, R = a->kv_lora, KVW = R + a->qk_rope, QK = a->qk_nope + a->qk_rope;
    const float scale = 1.0f / sqrtf((float)QK);
    for (int t = 0; t < a->rows; t++) {
        const int n = a->n + t; /* cached positions and new ones up to t */
        float *score = a->scores + ((size_t)t * NH + h) * (size_t)(a->n + a->rows - 1);
        float *lctx = a->lctx + ((size_t)t * NH + h) * R;
        const float *q = a->qf + ((size_t)t * NH + h) * QK, *qlat = a->qlat + ((size_t)t * NH + h) * R;
        for (int u = 0; u < n; u++) {
            const float *lat = a->latent + (size_t)u * KVW;
            score[u] = (op_dot(qlat, lat, R) + op_dot(q + a->qk_nope, lat + R, a->qk_rope)) * scale;
        }
        op_softmax(score, n);
        for (int i = 0; i < R; i++) lctx[i] = 0;
        for (int u = 0; u < n; u++) op_axpy(lctx, score[u], a->latent + (size_t)u * KVW, R);
    }
}

void cpu_op_mla(MatDevice *d, const DevMla *a) { pool_run(cpu_of(d)->pool, a->heads, mla_head, (void *)a); }

/* ---- MLA, expanded cache (the reference layout) ---- */

/* Row t's keys and values appended at position n + t: per head its nope key part, then the row's
 * k_pe, and its value. */
static void append_kv(const DevMlaExpanded *a) {
    const int NH = a->heads, QK = a->qk_nope + a->qk_rope, KVW = a->kv_lora + a->qk_rope, KV = a->qk_nope + a->v_head;
    for (int t = 0; t < a->rows; t++) {
        const float *kvf = a->kvf + (size_t)t * NH * KV, *kpe = a->ckv + (size_t)t * KVW + a->kv_lora;
        for (int h = 0; h < NH; h++) {
            float *key = a->keys + ((size_t)(a->n + t) * NH + h) * QK;
            float *val = a->values + ((size_t)(a->n + t) * NH + h) * a->v_head;
            const float *src = kvf + (size_t)h * KV;
            memcpy(key, src, sizeof *key * (size_t)a->qk_nope);
            memcpy(key + a->qk_nope, kpe, sizeof *key * (size_t)a->qk_rope);
            memcpy(val, src + a->qk_nope, sizeof *val * (size_t)a->v_head);
        }
    }
}

static void mla_head_expanded(void *ctx, int h) {
    const DevMlaExpanded *a = ctx;
    const int NH = a->heads, QK = a->qk_nope + a->qk_rope, V = a->v_head;
    const float scale = 1.0f / sqrtf((float)QK);
    float *score = a->scores + (size_t)h * (size_t)(a->n + a->rows);
    for (int t = 0; t < a->rows; t++) {
        const float *q = a->qf + ((size_t)t * NH + h) * QK;
        const int n = a->n + t + 1; /* causal: cached positions and new ones up to t */
        for (int u = 0; u < n; u++) {
            const float *key = a->keys + ((size_t)u * NH + h) * QK;
            float dot = 0;
            for (int i = 0; i < QK; i++) dot += q[i] * key[i];
            score[u] = dot * scale;
        }
        op_softmax(score, n);
        float *att = a->att + ((size_t)t * NH + h) * V;
        for (int j = 0; j < V; j++) att[j] = 0;
        for (int u = 0; u < n; u++) {
            const float *val = a->values + ((size_t)u * NH + h) * V;
            for (int j = 0; j < V; j++) att[j] += score[u] * val[j];
        }
    }
}

void cpu_op_mla_expanded(MatDevice *d, const DevMlaExpanded *a) {
    CpuDevice *c = cpu_of(d);
    const int R = a->kv_lora, KVW = R + a->qk_rope;
    for (int t = 0; t < a->rows; t++) /* the normalised latent; the trailing k_pe part stays raw */
        op_rmsnorm(a->cq + (size_t)t * R, a->ckv + (size_t)t * KVW, a->kv_a_norm, R, a->eps);
    cpu_mul(c, a->kvf, a->kv_b, a->cq, a->rows);
    append_kv(a);
    pool_run(c->pool, a->heads, mla_head_expanded, (void *)a);
}

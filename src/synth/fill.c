/* fill.c - random tensor contents.
 *
 * Scales: a linear weight [rows, cols] is uniform with variance 1/cols, so W x keeps the scale of
 * x. Norm weights are 1 +- 0.1. AttnRes projections give O(1) depth scores. Expert weights are
 * random E2M1 codes with E8M0 scales chosen so the dequantised variance is about 1/cols. A_log
 * entries beyond num_heads are padding: they are filled with large values so that an engine that
 * wrongly reads them (per-channel indexing) produces visibly different logits. */
#include "synth/fill.h"

#include <math.h>
#include <string.h>

#include "format/numfmt.h"
#include "util/rng.h"

typedef enum { F_LINEAR, F_NORM, F_EMBED, F_RESPROJ, F_CONV, F_ALOG, F_DTBIAS, F_BIAS, F_PACKED, F_SCALE } FillKind;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static FillKind kind_of(const SchemaEntry *e) {
    if (e->role == ROLE_EXPERT) return ends_with(e->name, "weight_scale") ? F_SCALE : F_PACKED;
    if (e->role == ROLE_EMBED) return F_EMBED;
    if (e->role == ROLE_SPINE) return F_LINEAR;
    switch (e->tensor) {
    case TENSOR_ATTN_RES_PROJ:
    case TENSOR_FFN_RES_PROJ:
    case TENSOR_OUT_RES_PROJ: return F_RESPROJ;
    case TENSOR_KDA_CONV_Q:
    case TENSOR_KDA_CONV_K:
    case TENSOR_KDA_CONV_V: return F_CONV;
    case TENSOR_KDA_A_LOG: return F_ALOG;
    case TENSOR_KDA_DT_BIAS: return F_DTBIAS;
    case TENSOR_ROUTER_BIAS: return F_BIAS;
    default: return F_NORM;
    }
}

/* E8M0 exponent for codes of RMS ~2.93 (uniform E2M1) to give weights of RMS ~1/sqrt(cols). */
static int expert_scale_center(int cols) { return 127 + (int)lround(-log2(2.93 * sqrt((double)cols))); }

static float value_for(FillKind k, const SchemaEntry *e, uint64_t idx, Rng *r, int a_log_heads) {
    double cols = (double)e->shape[e->ndim - 1];
    switch (k) {
    case F_LINEAR: return rng_sym(r) * (float)sqrt(3.0 / cols);
    case F_EMBED: return rng_sym(r) * 1.7f;
    case F_RESPROJ: return rng_sym(r) * (float)sqrt(3.0 / cols);
    case F_NORM: return 1.0f + 0.1f * rng_sym(r);
    case F_CONV: return 0.6f * rng_sym(r);
    case F_ALOG: return idx < (uint64_t)a_log_heads ? logf(1.0f + 7.5f * (rng_sym(r) + 1.0f)) : 3.0f + rng_sym(r);
    case F_DTBIAS: return 0.5f * rng_sym(r);
    case F_BIAS: return 0.05f * rng_sym(r);
    default: return 0;
    }
}

void synth_fill(const K3Config *c, const SchemaEntry *e, uint64_t seed, float embed_scale, uint64_t first,
                uint64_t count, void *out) {
    Rng r;
    rng_seed(&r, rng_hash(e->name, seed) ^ (first * 0x9e3779b97f4a7c15ull));
    FillKind k = kind_of(e);
    if (k == F_PACKED) { /* uniform codes: eight bytes per draw */
        uint8_t *o = out;
        uint64_t i = 0;
        for (; i + 8 <= count; i += 8) {
            uint64_t x = rng_next(&r);
            memcpy(o + i, &x, 8);
        }
        for (; i < count; i++) o[i] = (uint8_t)(rng_next(&r) >> 56);
        return;
    }
    if (k == F_SCALE) {
        /* scale bytes cover 32 columns each: cols of the logical matrix = 32 * shape[1] */
        int center = expert_scale_center((int)e->shape[1] * 32);
        for (uint64_t i = 0; i < count; i++) ((uint8_t *)out)[i] = (uint8_t)(center - 1 + (int)(rng_next(&r) % 3));
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        float v = value_for(k, e, first + i, &r, c->kda_heads);
        if (k == F_EMBED && embed_scale != 1) v *= embed_scale;
        if (e->dtype == DT_F32) memcpy((float *)out + i, &v, sizeof v);
        else ((uint16_t *)out)[i] = f32_to_bf16(v);
    }
}

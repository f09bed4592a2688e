/* presets.c - the architectures `deltafin synth` can write. Each is K3 scaled: the same tensor
 * set and layer rules (MLA where the one-based layer index is divisible by 4, and the last layer;
 * layer 0 dense), with dimensions chosen for its purpose. */
#include <math.h>
#include <string.h>

#include "synth/synth.h"
#include "util/err.h"

/* K3's layer-kind rule, applied to any depth. */
static void assign_layer_kinds(K3Config *c) {
    c->n_mla_layers = c->n_kda_layers = 0;
    for (int l = 0; l < c->n_layers; l++) {
        int mla = (l + 1) % 4 == 0 || l + 1 == c->n_layers;
        c->layer_kind[l] = mla ? LAYER_MLA : LAYER_KDA;
        if (mla) c->n_mla_layers++;
        else c->n_kda_layers++;
    }
}

/* The fields every preset shares with K3. */
static void k3_common(K3Config *c) {
    c->first_dense = 1;
    c->conv_kernel = 4;
    c->gate_lower_bound = -5.0f;
    c->situ_beta = 4.0f;
    c->situ_linear_beta = 25.0f;
    c->rms_eps = 1e-5f;
    c->routed_scaling = 1.0f;
    c->max_positions = 1048576;
    c->mx_group = 32;
}

static void set_vocab(K3Config *c, int n_mergeable) {
    c->vocab = n_mergeable + 256;
    c->bos_id = n_mergeable;      /* [BOS] is the first special token */
    c->eos_id = n_mergeable + 2;  /* <|end_of_msg|> */
    c->pad_id = n_mergeable + 255;/* [PAD] */
}

static void preset_tiny(K3Config *c) {
    /* 5 layers: MLA at one-based 4 and 5 (the last); AttnRes blocks of 2 -> three boundaries. */
    *c = (K3Config){.hidden = 64, .n_layers = 5, .dense_inter = 96, .n_experts = 8, .top_k = 2,
                    .n_shared = 1, .moe_inter = 32, .latent = 32, .mla_heads = 4, .q_lora = 32,
                    .kv_lora = 32, .qk_nope = 16, .qk_rope = 8, .v_head = 16, .kda_heads = 4,
                    .kda_head_dim = 16, .attn_res_block = 2};
    k3_common(c);
    c->a_log_len = 16; /* padded beyond num_heads to head_dim, as K3 stores 128 entries for 96 heads */
    set_vocab(c, 512);
}

static void preset_small(K3Config *c) {
    /* 10 layers, blocks of 4 (boundaries 0, 4, 8), 32 experts, top-4. */
    *c = (K3Config){.hidden = 256, .n_layers = 10, .dense_inter = 512, .n_experts = 32, .top_k = 4,
                    .n_shared = 2, .moe_inter = 128, .latent = 128, .mla_heads = 4, .q_lora = 96,
                    .kv_lora = 64, .qk_nope = 32, .qk_rope = 16, .v_head = 32, .kda_heads = 4,
                    .kda_head_dim = 64, .attn_res_block = 4};
    k3_common(c);
    c->a_log_len = 4;
    set_vocab(c, 1024);
}

/* K3's proportions at a chosen size: 896 experts of which 16 are used, experts ~95% of bytes. */
static void preset_big(K3Config *c, double size_gb) {
    *c = (K3Config){.hidden = 1024, .dense_inter = 4096, .n_experts = 896, .top_k = 16, .n_shared = 2,
                    .moe_inter = 448, .latent = 512, .mla_heads = 8, .q_lora = 384, .kv_lora = 128,
                    .qk_nope = 64, .qk_rope = 32, .v_head = 64, .kda_heads = 8, .kda_head_dim = 128,
                    .attn_res_block = 12};
    k3_common(c);
    c->a_log_len = 16;
    set_vocab(c, 4096);
    c->shared_inter = c->n_shared * c->moe_inter;
    /* a MoE layer: its experts plus (for a KDA layer) the projections, router and shared MLP */
    double spine = 2.0 * c->hidden * (5.0 * c->hidden + 2.0 * c->kda_head_dim + c->kda_heads + c->n_experts +
                                      2.0 * c->latent + 3.0 * c->shared_inter);
    double layer_bytes = (double)config_expert_bytes(c) * c->n_experts + spine;
    int layers = c->first_dense + (int)lround(size_gb * 1e9 / layer_bytes); /* + the dense layer(s) */
    c->n_layers = layers < 2 ? 2 : layers > K3_MAX_LAYERS ? K3_MAX_LAYERS : layers;
}

static void preset_k3(K3Config *c, int layers) {
    *c = (K3Config){.hidden = 7168, .dense_inter = 33792, .n_experts = 896, .top_k = 16, .n_shared = 2,
                    .moe_inter = 3072, .latent = 3584, .mla_heads = 96, .q_lora = 1536, .kv_lora = 512,
                    .qk_nope = 128, .qk_rope = 64, .v_head = 128, .kda_heads = 96, .kda_head_dim = 128,
                    .attn_res_block = 12, .n_layers = layers};
    k3_common(c);
    c->a_log_len = 128;
    set_vocab(c, 163584);
}

int synth_set_embed_scale(SynthPreset *p, double x) {
    /* any positive finite scale gives a valid checkpoint (BF16 holds 1.7e4 easily); the bounds
     * refuse zero, negatives, NaN, infinities and slips of the keyboard */
    if (!(x >= 0.001 && x <= 10000)) return df_fail("synth: --embed-scale %g is out of range (0.001..10000)", x);
    p->embed_scale = (float)x;
    return 0;
}

int synth_preset(SynthPreset *p, const char *name, const SynthOptions *opt) {
    memset(p, 0, sizeof *p);
    p->name = name;
    if (!strcmp(name, "tiny")) preset_tiny(&p->cfg), p->shard_target = 200u << 10;
    else if (!strcmp(name, "small")) preset_small(&p->cfg), p->shard_target = 4u << 20;
    else if (!strcmp(name, "big")) {
        if (!(opt->size_gb >= 0.1 && opt->size_gb <= 100000))
            return df_fail("synth: --preset big needs --size-gb between 0.1 and 100000");
        preset_big(&p->cfg, opt->size_gb);
        p->shard_target = 4ull << 30;
    } else if (!strcmp(name, "k3")) {
        int layers = opt->layers ? opt->layers : 2;
        if (layers < 1 || layers > 93) return df_fail("synth: --layers must be 1..93 for --preset k3");
        preset_k3(&p->cfg, layers);
        p->shard_target = 8ull << 30;
    } else
        return df_fail("synth: unknown preset '%s' (tiny, small, big, k3)", name);
    if (opt->layers && strcmp(name, "k3") != 0) {
        if (opt->layers < 1 || opt->layers > K3_MAX_LAYERS) return df_fail("synth: --layers must be 1..%d", K3_MAX_LAYERS);
        p->cfg.n_layers = opt->layers;
    }
    p->embed_scale = 1;
    p->cfg.shared_inter = p->cfg.n_shared * p->cfg.moe_inter;
    assign_layer_kinds(&p->cfg);
    return 0;
}

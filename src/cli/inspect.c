/* deltafin inspect DIR - what a checkpoint holds, after full validation: config, index, every
 * shard header against the schema, and the tokenizer files. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "format/catalog.h"
#include "format/schema.h"
#include "text/tokenizer.h"
#include "util/err.h"

static void print_layers(const K3Config *c) {
    printf("layers      %d: %d KDA, %d MLA (one-based MLA:", c->n_layers, c->n_kda_layers, c->n_mla_layers);
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == LAYER_MLA) printf(" %d", l + 1);
    printf("); dense FFN in layers 0..%d, MoE after\n", c->first_dense - 1);
    printf("attn-res    blocks of %d layers -> %d anchors at the tail\n", c->attn_res_block,
           (c->n_layers + c->attn_res_block - 1) / c->attn_res_block);
}

static void print_architecture(const K3Config *c) {
    printf("hidden      %d, vocab %d (bos %d, eos %d, pad %d)\n", c->hidden, c->vocab, c->bos_id, c->eos_id, c->pad_id);
    print_layers(c);
    printf("kda         %d heads x %d, conv %d, A_log stored %d%s\n", c->kda_heads, c->kda_head_dim, c->conv_kernel,
           c->a_log_len, c->a_log_len > c->kda_heads ? " (padded, extra entries ignored)" : "");
    printf("mla         %d heads, q_lora %d, kv_lora %d, qk %d+%d, v %d\n", c->mla_heads, c->q_lora, c->kv_lora,
           c->qk_nope, c->qk_rope, c->v_head);
    printf("moe         %d experts, top-%d, %d shared (fused width %d), expert %d->%d->%d MXFP4, dense width %d\n",
           c->n_experts, c->top_k, c->n_shared, c->shared_inter, c->latent, c->moe_inter, c->latent, c->dense_inter);
}

static void print_counts(const Catalog *cat) {
    int n_expert_tensors = 0, n_spine = 0;
    for (int i = 0; i < cat->n_tensors; i++) {
        if (strstr(cat->tensors[i].name, ".experts.")) n_expert_tensors++;
        else if (!strncmp(cat->tensors[i].name, SCHEMA_PREFIX, strlen(SCHEMA_PREFIX))) n_spine++;
    }
    printf("tensors     %d in %d shard(s): %d spine/global, %d routed-expert, %d skipped (vision)\n", cat->n_tensors,
           cat->n_shards, n_spine, n_expert_tensors, cat->n_skipped);
}

static void print_bytes(const Catalog *cat) {
    const K3Config *c = &cat->cfg;
    int moe_layers = c->n_layers - c->first_dense;
    double experts = (double)cat->expert_bytes * c->n_experts * moe_layers;
    double per_token_experts = (double)cat->expert_bytes * c->top_k * moe_layers;
    double row = (double)c->hidden * 2;
    printf("bytes       spine %.3f GB, embedding %.3f GB, experts %.3f GB (%.1f%% of the model)\n", cat->spine_bytes / 1e9,
           cat->embed_bytes / 1e9, experts / 1e9,
           100.0 * experts / (experts + (double)cat->spine_bytes + (double)cat->embed_bytes));
    printf("per expert  %llu bytes (one contiguous span)\n", (unsigned long long)cat->expert_bytes);
    printf("per token   %.3f GB = spine %.3f GB + %d experts x %d layers %.3f GB + embedding row %.0f B\n",
           ((double)cat->spine_bytes + per_token_experts + row) / 1e9, cat->spine_bytes / 1e9, c->top_k, moe_layers,
           per_token_experts / 1e9, row);
}

int cmd_inspect(Settings *set, int argc, char **argv) {
    static const char about[] =
        "Validates a checkpoint (every tensor the config implies, dtypes, shapes, expert spans, the tokenizer "
        "files) and summarises it: architecture, tensor counts, spine and expert bytes, bytes read per token. The "
        "directory is -m/--model DIR, or given as the argument.";
    const CliCommand cmd = {"inspect", "[options] [DIR]", about, NULL, 0, 1, "DIR", 0};
    const char *pos[1];
    int n_pos;
    cli_parse(&cmd, set, argc, argv, pos, &n_pos);
    if (n_pos == 1 && set->root && strcmp(set->root, pos[0]))
        cli_usage_error(&cmd, "two directories: %s and -m/--model %s", pos[0], set->root);
    if (n_pos == 1) settings_set(set, settings_find("DELTAFIN_ROOT"), pos[0], "the argument");
    ModelDir m;
    cli_model_dir(set, MODEL_READ, &m);
    Catalog cat;
    if (catalog_open(&cat, m.dir)) df_die("%s", df_errmsg());
    Tokenizer *tok = tok_load_checked(m.dir, cat.cfg.vocab);
    if (!tok) df_die("%s", df_errmsg());
    printf("checkpoint  %s: valid K3-architecture checkpoint%s%s%s\n", m.dir, m.note[0] ? " [" : "", m.note,
           m.note[0] ? "]" : "");
    printf("tokenizer   %d ids: %d mergeable + %d special\n", tok_vocab_size(tok), tok_n_mergeable(tok), TOK_N_SPECIAL);
    tok_free(tok);
    print_architecture(&cat.cfg);
    print_counts(&cat);
    print_bytes(&cat);
    catalog_free(&cat);
    return 0;
}

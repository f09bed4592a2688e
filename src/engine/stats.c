/* stats.c - one generation's numbers, printed (--stats) and as a JSON object (--stats-json).
 *
 * "numerics" names what decides the output tokens (spine format, experts per token, A_log
 * indexing, MLA cache layout: the last changes only fp32 reduction order); every other setting
 * (threads, store, speculation, prefetch, chunking) leaves the tokens unchanged, so two runs with the same numerics must agree token for token. */
#include "engine/stats.h"

#include <string.h>

#include "engine/engine_internal.h"
#include "kernels/kernels.h"

static int is_lossy(const Engine *e) { return e->spine_int8 || e->cat.cfg.top_k != e->top_k_full; }

static json_t *numerics_json(const Engine *e) {
    char desc[128];
    snprintf(desc, sizeof desc, "spine %s, experts top-%d of %d, A_log %s, MLA cache %s", e->spine_int8 ? "int8" : "bf16",
             e->cat.cfg.top_k, e->top_k_full, e->opt.a_log == ALOG_PER_HEAD ? "per-head" : "per-channel",
             e->opt.mla_cache == MLA_CACHE_LATENT ? "latent" : "expanded");
    return json_pack("{s:s, s:b, s:b, s:i, s:i, s:s}", "key", desc, "lossy", is_lossy(e), "spine_int8", e->spine_int8,
                     "top_k", e->cat.cfg.top_k, "top_k_full", e->top_k_full, "a_log",
                     e->opt.a_log == ALOG_PER_HEAD ? "per-head" : "per-channel");
}

/* What the streaming store read, in all and during decode; null for the mapped store (its
 * reads are page faults nobody counts). */
static json_t *read_json(Engine *e, const GenResult *r) {
    if (!e->streaming) return json_null();
    EngineReads io = engine_reads(e);
    const EngineReads *p = &r->io_at_decode;
    uint64_t hits = io.expert_hits - p->expert_hits, misses = io.expert_misses - p->expert_misses;
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "spine_bytes", (json_int_t)io.spine_bytes, "expert_bytes",
                     (json_int_t)io.expert_bytes, "decode_spine_bytes", (json_int_t)(io.spine_bytes - p->spine_bytes),
                     "decode_expert_bytes", (json_int_t)(io.expert_bytes - p->expert_bytes), "decode_cache_hits",
                     (json_int_t)hits, "decode_cache_misses", (json_int_t)misses);
}

/* Totals over the whole run; decode_positions counts the rows decode fed, rejected drafts included;
 * lookahead_routed / lookahead_guessed: experts routed in layers whose selection was guessed a
 * layer ahead (K3_LOOKAHEAD), and how many of them were guessed (recall = guessed / routed). */
static json_t *phases_json(const ModelStats *s, const ModelStats *at_decode) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}", "attention_s",
                     s->attention_s, "ffn_s", s->ffn_s, "spine_wait_s", s->spine_wait_s, "expert_wait_s", s->expert_wait_s,
                     "first_wait_s", s->first_wait_s, "experts_s",
                     s->experts_s, "route_s", s->route_s, "head_s", s->head_s, "positions", (json_int_t)s->positions, "forwards",
                     (json_int_t)s->forwards, "decode_positions", (json_int_t)(s->positions - at_decode->positions),
                     "decode_forwards", (json_int_t)(s->forwards - at_decode->forwards), "lookahead_routed",
                     (json_int_t)s->look_routed, "lookahead_guessed", (json_int_t)s->look_hits);
}

/* The layer pass's expert cache in device memory over the whole run (model/devcache.h); null
 * without a layer pass. */
static json_t *device_cache_json(const Engine *e) {
    int holds_all = 0, slots = model_device_slots(e->model, &holds_all);
    if (slots < 0) return json_null();
    const ModelStats *s = model_stats(e->model);
    const DevCacheCounts *c = &s->dev_cache;
    return json_pack("{s:i, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "slots", slots, "holds_all", holds_all, "hits",
                     (json_int_t)c->hits, "misses", (json_int_t)c->misses, "admitted", (json_int_t)c->admitted,
                     "evictions", (json_int_t)c->evictions, "recopies", (json_int_t)c->recopies, "copied",
                     (json_int_t)s->experts_copied, "cpu", (json_int_t)s->experts_cpu);
}

/* The layer pass over the whole run: forwards whose every layer ran on the GPU, decode-state copies
 * between host and GPU, stretches of decode steps run as CUDA graphs; null when no forward ran
 * there (as --stats, which then prints no layer-pass line). */
static json_t *layer_pass_json(const ModelStats *s) {
    if (!s->dev_forwards) return json_null();
    return json_pack("{s:I, s:I, s:I}", "device_forwards", (json_int_t)s->dev_forwards, "state_copies",
                     (json_int_t)s->state_syncs, "graph_stretches", (json_int_t)s->dev_graphs);
}

static json_t *spec_json(const Spec *sp) {
    return json_pack("{s:b, s:I, s:I, s:I, s:I, s:I}", "on", sp->on, "passes", (json_int_t)sp->passes, "verifies",
                     (json_int_t)sp->verifies, "drafted", (json_int_t)sp->drafted, "accepted",
                     (json_int_t)sp->accepted, "paused", (json_int_t)sp->paused);
}

json_t *generate_stats_json(Engine *e, const GenResult *r, const int *tokens) {
    json_t *ids = json_array();
    for (int i = 0; i < r->generated; i++) json_array_append_new(ids, json_integer(tokens[i]));
    /* the first token comes from the prefill's logits; decode produced the rest */
    double per_tok = r->generated > 1 ? r->decode_s / (r->generated - 1) : 0;
    return json_pack("{s:i, s:i, s:o, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:b, s:i, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
                     "prompt_tokens", r->prompt_tokens, "generated", r->generated, "tokens", ids, "prefill_s",
                     r->prefill_s, "decode_s", r->decode_s, "s_per_token", per_tok, "tokens_per_s",
                     per_tok > 0 ? 1 / per_tok : 0.0, "prefill_tokens_per_s",
                     r->prefill_s > 0 ? r->prompt_tokens / r->prefill_s : 0.0, "interrupted", r->interrupted,
                     "hit_stop", r->hit_stop, "hit_context", r->hit_context, "threads", e->threads, "store",
                     e->streaming ? "stream" : "mapped", "kernels", kern_isa(), "numerics", numerics_json(e), "read",
                     read_json(e, r), "phases", phases_json(model_stats(e->model), &r->at_decode), "speculation",
                     spec_json(&r->spec), "device_cache", device_cache_json(e), "layer_pass",
                     layer_pass_json(model_stats(e->model)));
}

void generate_print_stats(const Engine *e, const GenResult *r, FILE *f) {
    const ModelStats *s = model_stats(e->model);
    double per_tok = r->generated > 1 ? r->decode_s / (r->generated - 1) : 0;
    const Spec *sp = &r->spec;
    fprintf(f, "stats: prompt %d tokens in %.4f s (%.2f tok/s) | generated %d tokens, %.5f s/token (%.2f tok/s)\n",
            r->prompt_tokens, r->prefill_s, r->prefill_s > 0 ? r->prompt_tokens / r->prefill_s : 0, r->generated, per_tok,
            per_tok > 0 ? 1 / per_tok : 0);
    fprintf(f, "stats: phases over %llu positions: attention %.3f s, ffn %.3f s (expert wait %.3f s, of it %.3f s for each layer's "
               "first read; experts %.3f s, starting reads %.3f s), head %.3f s; expert bytes %.3f GB\n",
            (unsigned long long)s->positions, s->attention_s, s->ffn_s, s->expert_wait_s, s->first_wait_s, s->experts_s,
            s->route_s, s->head_s, s->expert_bytes / 1e9);
    uint64_t decoded = r->generated > 0 ? (uint64_t)r->generated - 1 : 0; /* the first comes from the prefill */
    fprintf(f, "stats: speculation %s: %llu passes, %.2f tokens/pass; %llu drafts verified, %llu of %llu drafted tokens "
               "accepted (%.1f%%); %llu pauses, %llu tokens decoded with drafting paused\n",
            sp->on ? "on" : "off (K3_SPEC=0)", (unsigned long long)sp->passes,
            sp->passes ? (double)decoded / sp->passes : 0, (unsigned long long)sp->verifies,
            (unsigned long long)sp->accepted, (unsigned long long)sp->drafted,
            sp->drafted ? 100.0 * sp->accepted / sp->drafted : 0, (unsigned long long)sp->pauses,
            (unsigned long long)sp->paused);
    if (s->dev_forwards)
        fprintf(f, "stats: layer pass: %llu of %llu forwards on the GPU; decode state copied between host and GPU %llu times; "
                   "%llu stretches between waits run as CUDA graphs\n",
                (unsigned long long)s->dev_forwards, (unsigned long long)s->forwards, (unsigned long long)s->state_syncs,
                (unsigned long long)s->dev_graphs);
    int holds_all = 0, slots = model_device_slots(e->model, &holds_all);
    const DevCacheCounts *dc = &s->dev_cache;
    const uint64_t routed = dc->hits + dc->misses;
    if (slots > 0)
        fprintf(f, "stats: GPU expert cache (%d slots): %llu hits of %llu routed experts (%.1f%%); %llu copied into the "
                   "cache (%llu evictions, %llu re-copies of refilled host slots)\n",
                slots, (unsigned long long)dc->hits, (unsigned long long)routed, routed ? 100.0 * dc->hits / routed : 0,
                (unsigned long long)dc->admitted, (unsigned long long)dc->evictions, (unsigned long long)dc->recopies);
    if (s->experts_cpu || s->experts_copied)
        fprintf(f, "stats: layer pass: of the experts the GPU's cache missed, %llu computed by the CPU threads, %llu copied\n",
                (unsigned long long)s->experts_cpu, (unsigned long long)s->experts_copied);
    if (s->look_routed)
        fprintf(f, "stats: router lookahead: %llu of %llu routed experts guessed a layer ahead (recall %.1f%%)\n",
                (unsigned long long)s->look_hits, (unsigned long long)s->look_routed, 100.0 * s->look_hits / s->look_routed);
    engine_print_store_stats(e, f);
}

/* report.c - what an open engine tells the user: the start-up line with every resolved
 * setting, the per-forward profile (K3_PROFILE) and the streaming store's totals (--stats). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "util/clock.h"

/* The start-up line's words on the layer pass's expert cache in device memory (model/devcache.h):
 * ", expert cache ...", or "" without a layer pass. */
static void expert_cache_text(const Engine *e, char *text, size_t n) {
    int holds_all = 0, slots = model_device_slots(e->model, &holds_all);
    if (slots < 0) snprintf(text, n, "%s", "");
    else if (slots == 0) snprintf(text, n, ", no expert cache (experts run from host memory)");
    else
        snprintf(text, n, ", expert cache %d slots (%.1f GB, %s)%s", slots, slots * (double)e->cat.expert_bytes / 1e9,
                 cache_policy_name(e->opt.store.policy), holds_all ? " holding every expert" : "");
}

static void print_warnings(const Engine *e, FILE *f);

void engine_print_settings(const Engine *e, FILE *f) {
    const K3Config *c = &e->cat.cfg;
    uint64_t total = (uint64_t)(c->n_layers - c->first_dense) * (uint64_t)c->n_experts, local = total;
    if (e->inst) installer_expert_counts(e->inst, &local, &total);
    char topk[64] = "";
    if (c->top_k != e->top_k_full)
        snprintf(topk, sizeof topk, " | experts top-%d of %d (lossy)", c->top_k, e->top_k_full);
    char device[384], cache[128];
    MatDevice *dev = device_current();
    expert_cache_text(e, cache, sizeof cache);
    int held = e->model ? model_spine_held(e->model) : -1;
    if (dev && held >= 0)
        snprintf(device, sizeof device, "%s, layer pass, spine %d/%d layers held%s", dev->desc, held, c->n_layers, cache);
    else if (dev) snprintf(device, sizeof device, "%s%s", dev->desc, cache);
    else snprintf(device, sizeof device, "cpu (%s kernels)", kern_isa());
    fprintf(f, "deltafin: model %s%s%s%s (%d layers, %d experts, top-%d) | device %s | threads %d | "
               "spine %s | experts local %llu/%llu (%s)%s | context %d (MLA cache %s), prefill window %d | A_log %s | speculation %s | "
               "fp32 %s\n",
            e->cat.dir, e->opt.model_note ? " [" : "", e->opt.model_note ? e->opt.model_note : "",
            e->opt.model_note ? "]" : "", c->n_layers, c->n_experts, e->top_k_full, device, e->threads,
            e->spine_int8 ? "int8 (lossy)" : "bf16 (exact)",
            (unsigned long long)local,
            (unsigned long long)total, e->streaming ? "streamed" : "mapped", topk, e->max_context,
            e->opt.mla_cache == MLA_CACHE_LATENT ? "latent" : "expanded", e->window,
            e->opt.a_log == ALOG_PER_HEAD ? "per-head" : "per-channel (compatibility mode)",
            e->opt.spec ? "n-gram (lossless)" : "off", e->opt.decoding ? e->opt.decoding : "greedy");
    if (e->streaming) stream_print_plan(&e->stream, f);
    print_warnings(e, f);
}

/* What both start-up forms add: a replayed routing makes the output meaningless; an install
 * that lacks experts says what finishing it costs. */
static void print_warnings(const Engine *e, FILE *f) {
    const K3Config *c = &e->cat.cfg;
    if (e->opt.replay)
        fprintf(f, "deltafin: BENCHMARK: experts chosen by the router trace %s (%d rows, top-%d of %d, mapped onto %d x "
                   "top-%d), not by the model: the output is meaningless%s\n",
                e->opt.replay, e->replay.trace.n_rows, e->replay.trace.top_k, e->replay.trace.n_experts,
                e->replay.map.streams, c->top_k,
                e->replay.wrap.src.predict ? "; router lookahead simulated at the recall DELTAFIN_REPLAY_LOOKAHEAD" : "");
    if (e->inst) {
        char reminder[1024];
        installer_reminder(e->inst, reminder, sizeof reminder);
        if (reminder[0]) fprintf(f, "%s\n", reminder);
    }
}

void engine_print_summary(const Engine *e, FILE *f) {
    const K3Config *c = &e->cat.cfg;
    const char *base = strrchr(e->cat.dir, '/'), *note = e->opt.model_note;
    base = base && base[1] ? base + 1 : e->cat.dir;
    char lossy[256] = "";
    size_t at = 0;
    if (e->spine_int8) at += (size_t)snprintf(lossy + at, sizeof lossy - at, " | int8 spine (lossy)");
    if (c->top_k != e->top_k_full && at < sizeof lossy)
        at += (size_t)snprintf(lossy + at, sizeof lossy - at, " | experts top-%d of %d (lossy)", c->top_k, e->top_k_full);
    const char *decoding = e->opt.decoding ? e->opt.decoding : "greedy";
    int exact = !at && !strcmp(decoding, "greedy");
    MatDevice *dev = device_current();
    fprintf(f, "deltafin: %s%s | %s, %d thread%s%s%s | %s\n", note && !strncmp(note, "the bundled", 11) ? "the bundled " : "",
            base, dev ? dev->desc : "cpu", e->threads, e->threads == 1 ? "" : "s", e->streaming ? ", streaming" : "", lossy,
            exact ? "exact (fp32, greedy)" : decoding);
    print_warnings(e, f);
}

static StreamCounters io_counters(const Engine *e) {
    StreamCounters z = {0};
    return e->streaming ? stream_counters((StreamStore *)&e->stream) : z; /* counters are read under the stores' locks */
}

void engine_profile_start(Engine *e) {
    e->prof_stats = *model_stats(e->model), e->prof_io = io_counters(e), e->prof_t = df_now();
}

void engine_profile_step(Engine *e, FILE *f) {
    if (!e->opt.profile) return;
    const ModelStats *s = model_stats(e->model), *p = &e->prof_stats;
    StreamCounters io = io_counters(e), *q = &e->prof_io;
    double now = df_now(), dt = now - e->prof_t;
    double spine_w = s->spine_wait_s - p->spine_wait_s, exp_w = s->expert_wait_s - p->expert_wait_s;
    double route = s->route_s - p->route_s, first = s->first_wait_s - p->first_wait_s;
    uint64_t sb = io.spine_bytes - q->spine_bytes, eb = io.expert_bytes - q->expert_bytes;
    uint64_t hits = io.experts.hits - q->experts.hits, miss = io.experts.misses - q->experts.misses;
    uint64_t pf = io.experts.prefetch_hits - q->experts.prefetch_hits;
    uint64_t dhits = s->dev_cache.hits - p->dev_cache.hits, dmiss = s->dev_cache.misses - p->dev_cache.misses;
    char dev[96] = "";
    int holds_all = 0;
    if (model_device_slots(e->model, &holds_all) > 0)
        snprintf(dev, sizeof dev, " | GPU expert cache: hits %llu/%llu, %llu evictions", (unsigned long long)dhits,
                 (unsigned long long)(dhits + dmiss), (unsigned long long)(s->dev_cache.evictions - p->dev_cache.evictions));
    fprintf(f, "profile: pos %llu +%llu: %.3f s | read spine %.1f MB, experts %.1f MB, %.2f GB/s | cache hits %llu/%llu "
               "(%.0f%%, %llu prefetched)%s | wait spine %.3f s, experts %.3f s (first read per layer %.3f s) | compute %.3f s "
               "(starting reads %.3f s)\n",
            (unsigned long long)p->positions, (unsigned long long)(s->positions - p->positions), dt, sb / 1e6, eb / 1e6,
            dt > 0 ? (sb + eb) / dt / 1e9 : 0, (unsigned long long)hits, (unsigned long long)(hits + miss),
            hits + miss ? 100.0 * hits / (hits + miss) : 0, (unsigned long long)pf, dev, spine_w, exp_w, first,
            dt - spine_w - exp_w, route);
    e->prof_stats = *s, e->prof_io = io, e->prof_t = now;
}

void engine_print_store_stats(const Engine *e, FILE *f) {
    if (!e->streaming) return;
    StreamCounters io = io_counters(e);
    const ModelStats *s = model_stats(((Engine *)e)->model);
    uint64_t need = io.experts.hits + io.experts.misses, pos = s->positions ? s->positions : 1;
    fprintf(f, "stats: read spine %.3f GB, experts %.3f GB (%.1f MB per position) | expert cache hits %llu/%llu (%.1f%%), "
               "prefetch %llu started, %llu used | spine wait %.3f s\n",
            io.spine_bytes / 1e9, io.expert_bytes / 1e9, (io.spine_bytes + io.expert_bytes) / 1e6 / (double)pos,
            (unsigned long long)io.experts.hits, (unsigned long long)need, need ? 100.0 * io.experts.hits / need : 0,
            (unsigned long long)io.experts.prefetches, (unsigned long long)io.experts.prefetch_hits, s->spine_wait_s);
}

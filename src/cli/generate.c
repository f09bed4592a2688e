#include "cli/generate.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/internal.h"
#include "util/err.h"

static volatile sig_atomic_t interrupts;

static void on_sigint(int sig) {
    (void)sig;
    if (++interrupts >= 2) _exit(130);
}

void generate_install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int generate_interrupted(void) { return interrupts > 0; }

/* The checks token-at-a-time decoding makes around each token; returns 1 to stop. len: the
 * positions the state holds before tok would be fed. */
static int emit(const Engine *e, int tok, int len, const GenOptions *opt, TokenFn fn, void *ctx, GenResult *res) {
    if (generate_interrupted()) return res->interrupted = 1;
    if (tok == opt->stop_token) return res->hit_stop = 1;
    res->generated++;
    if (fn(ctx, tok)) return 1;
    if (res->generated == opt->max_new) return 1;
    if (len >= e->max_context) return res->hit_context = 1;
    return 0;
}

/* Feeds tok (and a draft after it when speculation has one, at most room tokens) and returns
 * the rows of logits now ready to be emitted from: 1 plus the accepted drafts; -1 on failure.
 * *fed: the rows the forward fed. */
static int advance(Engine *e, State *st, Spec *sp, const int *hist, int n_hist, int tok, int room, float *rows,
                   int *fed) {
    const int V = e->cat.cfg.vocab;
    int in[MODEL_MAX_VERIFY] = {tok};
    int d = spec_draft(sp, hist, n_hist, room, in + 1);
    sp->passes++;
    *fed = d + 1;
    double t0 = model_now();
    if (d == 0) {
        if (model_forward(e->model, st, &tok, 1, rows, 0)) return -1;
        spec_plain(sp, model_now() - t0);
        return 1;
    }
    if (model_forward_verify(e->model, st, in, d + 1, rows)) return -1;
    int a = 0;
    while (a < d && model_argmax(e->model, rows + (size_t)a * V) == in[a + 1]) a++;
    spec_record(sp, d, a, model_now() - t0);
    return a + 1;
}

int generate(Engine *e, State *st, const int *prompt, int n_prompt, const GenOptions *opt, TokenFn fn, void *ctx,
             GenResult *res) {
    memset(res, 0, sizeof *res);
    if (spec_init(&res->spec)) return -1;
    res->spec.source = opt->draft, res->spec.source_ctx = opt->draft_ctx;
    const int V = e->cat.cfg.vocab;
    float *rows = df_malloc(sizeof *rows * (size_t)V * MODEL_MAX_VERIFY);
    int *hist = df_malloc(sizeof *hist * ((size_t)n_prompt + (size_t)e->max_context + 1));
    memcpy(hist, prompt, sizeof *hist * (size_t)n_prompt);
    int n_hist = n_prompt;
    res->prompt_tokens = n_prompt;
    double t0 = model_now();
    int rc = engine_prefill(e, st, prompt, n_prompt, opt->chunk, NULL, rows);
    res->prefill_s = model_now() - t0;
    res->at_decode = *model_stats(e->model);
    if (e->streaming) res->io_at_decode = stream_counters(&e->stream);
    if (!rc) engine_profile_step(e, stderr);
    t0 = model_now();
    /* rows[0..ready) predict the next tokens; fed = rows the last forward fed (the state holds
     * them all until state_commit keeps the ones whose predictions were emitted) */
    int ready = 1, fed = 1;
    while (!rc && opt->max_new > 0) {
        int i = 0, stop = 0, tok = -1, base = state_length(st) - fed + 1;
        while (i < ready && !stop) {
            tok = model_argmax(e->model, rows + (size_t)i * V);
            stop = emit(e, tok, base + i, opt, fn, ctx, res);
            i++;
            if (!stop) hist[n_hist++] = tok;
        }
        state_commit(st, i);
        if (stop) break;
        int room = opt->max_new - res->generated - 1, ctx_room = e->max_context - state_length(st) - 1;
        ready = advance(e, st, &res->spec, hist, n_hist, tok, room < ctx_room ? room : ctx_room, rows, &fed);
        if (ready < 0) rc = -1;
        else engine_profile_step(e, stderr);
    }
    res->decode_s = model_now() - t0;
    free(rows);
    free(hist);
    return rc;
}

void generate_print_stats(const Engine *e, const GenResult *r, FILE *f) {
    const ModelStats *s = model_stats(e->model);
    double per_tok = r->generated > 1 ? r->decode_s / (r->generated - 1) : 0;
    const Spec *sp = &r->spec;
    fprintf(f, "stats: prompt %d tokens in %.4f s (%.2f tok/s) | generated %d tokens, %.5f s/token (%.2f tok/s)\n",
            r->prompt_tokens, r->prefill_s, r->prefill_s > 0 ? r->prompt_tokens / r->prefill_s : 0, r->generated, per_tok,
            per_tok > 0 ? 1 / per_tok : 0);
    fprintf(f, "stats: phases over %llu positions: attention %.3f s, ffn %.3f s (expert wait %.3f s, experts %.3f s), "
               "head %.3f s; expert bytes %.3f GB\n",
            (unsigned long long)s->positions, s->attention_s, s->ffn_s, s->expert_wait_s, s->experts_s, s->head_s,
            s->expert_bytes / 1e9);
    uint64_t decoded = r->generated > 0 ? (uint64_t)r->generated - 1 : 0; /* the first comes from the prefill */
    fprintf(f, "stats: speculation %s: %llu passes, %.2f tokens/pass; %llu drafts verified, %llu of %llu drafted tokens "
               "accepted (%.1f%%); %llu pauses, %llu tokens decoded with drafting paused\n",
            sp->on ? "on" : "off (K3_SPEC=0)", (unsigned long long)sp->passes,
            sp->passes ? (double)decoded / sp->passes : 0, (unsigned long long)sp->verifies,
            (unsigned long long)sp->accepted, (unsigned long long)sp->drafted,
            sp->drafted ? 100.0 * sp->accepted / sp->drafted : 0, (unsigned long long)sp->pauses,
            (unsigned long long)sp->paused);
    if (s->look_routed)
        fprintf(f, "stats: router lookahead: %llu of %llu routed experts guessed a layer ahead (recall %.1f%%)\n",
                (unsigned long long)s->look_hits, (unsigned long long)s->look_routed, 100.0 * s->look_hits / s->look_routed);
    engine_print_store_stats(e, f);
}

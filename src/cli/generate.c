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

int generate(Engine *e, State *st, const int *prompt, int n_prompt, const GenOptions *opt, TokenFn fn, void *ctx,
             GenResult *res) {
    memset(res, 0, sizeof *res);
    const int V = e->cat.cfg.vocab;
    float *logits = df_malloc(sizeof *logits * (size_t)V);
    res->prompt_tokens = n_prompt;
    double t0 = model_now();
    int rc = engine_prefill(e, st, prompt, n_prompt, opt->chunk, NULL, logits);
    res->prefill_s = model_now() - t0;
    if (!rc) engine_profile_step(e, stderr);
    t0 = model_now();
    while (!rc && res->generated < opt->max_new) {
        if (generate_interrupted()) {
            res->interrupted = 1;
            break;
        }
        int tok = model_argmax(e->model, logits);
        if (tok == opt->stop_token) {
            res->hit_stop = 1;
            break;
        }
        res->generated++;
        if (fn(ctx, tok)) break;
        if (res->generated == opt->max_new) break;
        if (state_length(st) >= e->max_context) {
            res->hit_context = 1;
            break;
        }
        rc = model_forward(e->model, st, &tok, 1, logits, 0);
        if (!rc) engine_profile_step(e, stderr);
    }
    res->decode_s = model_now() - t0;
    free(logits);
    return rc;
}

void generate_print_stats(const Engine *e, const GenResult *r, FILE *f) {
    const ModelStats *s = model_stats(e->model);
    double per_tok = r->generated > 1 ? r->decode_s / (r->generated - 1) : 0;
    fprintf(f, "stats: prompt %d tokens in %.4f s (%.2f tok/s) | generated %d tokens, %.5f s/token (%.2f tok/s)\n",
            r->prompt_tokens, r->prefill_s, r->prefill_s > 0 ? r->prompt_tokens / r->prefill_s : 0, r->generated, per_tok,
            per_tok > 0 ? 1 / per_tok : 0);
    fprintf(f, "stats: phases over %llu positions: attention %.3f s, ffn %.3f s (expert wait %.3f s, experts %.3f s), "
               "head %.3f s; expert bytes %.3f GB\n",
            (unsigned long long)s->positions, s->attention_s, s->ffn_s, s->expert_wait_s, s->experts_s, s->head_s,
            s->expert_bytes / 1e9);
    engine_print_store_stats(e, f);
}

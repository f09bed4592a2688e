#include "engine/generate.h"

#include <string.h>

#include "engine/engine_internal.h"
#include "util/clock.h"

/* Hands out tokens until a check stops it; returns session_next's failure (-1) or 0. */
static int decode(Session *s, const GenOptions *opt, TokenFn fn, void *ctx, GenResult *res) {
    while (res->generated < opt->max_new) {
        int tok, rc = session_next(s, opt->sampler, (uint64_t)res->generated, &tok, NULL, opt->max_new - res->generated - 1,
                                   opt->cancel, opt->cancel_ctx);
        if (rc == 1) return res->hit_context = 1, 0;
        if (rc == 2) return res->interrupted = 1, 0;
        if (rc < 0) return -1;
        if (tok == opt->stop_token) return res->hit_stop = 1, 0;
        if (opt->sampler) sampler_accept(opt->sampler, tok);
        res->generated++;
        if (fn(ctx, tok)) break;
    }
    return 0;
}

int generate(Session *s, const int32_t *prompt, size_t n_prompt, const GenOptions *opt, TokenFn fn, void *ctx,
             GenResult *res) {
    Engine *e = s->e;
    memset(res, 0, sizeof *res);
    res->prompt_tokens = (int)n_prompt;
    double t0 = df_now();
    int rc = session_prefill(s, prompt, n_prompt, opt->cancel, opt->cancel_ctx, NULL);
    res->prefill_s = df_now() - t0;
    res->at_decode = *model_stats(e->model);
    res->io_at_decode = engine_reads(e);
    t0 = df_now();
    if (rc == 1) res->interrupted = 1, rc = 0;
    else if (rc == 0) rc = decode(s, opt, fn, ctx, res);
    res->decode_s = df_now() - t0;
    if (rc == 0) session_settle(s);
    res->spec = s->spec;
    return rc;
}

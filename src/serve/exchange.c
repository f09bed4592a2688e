#include "serve/exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "text/reply_grammar.h"
#include "util/clock.h"
#include "text/utf8.h"
#include "text/xtml.h"
#include "util/err.h"

#define COMPLETION_DEFAULT_MAX 256

/* chatcmpl-X, cmpl-X, or resp_X (the Responses API's form). */
static void make_id(Exchange *x, const ApiRequest *r) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(x->id, sizeof x->id, "%s%08lx%06lx%04x", r->responses ? "resp_" : x->kind == API_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long)ts.tv_sec, (unsigned long)(ts.tv_nsec / 1000) & 0xffffff, n & 0xffff);
    x->head = (WireHead){x->kind, x->id, (int64_t)ts.tv_sec, NULL};
}

/* The request field a message of the renderer or the reply grammar starts with
 * ("messages[2].tool_call_id: ...": the path; with top: its first name, "tools[1].function.name:
 * ..." is "tools"). */
static void field_of(const char *msg, int top, char *field, size_t n) {
    size_t len = strcspn(msg, top ? ".[: " : ": ");
    snprintf(field, n, "%.*s", (int)(len < n ? len : n - 1), msg);
}

int exchange_prompt(const ExchangeEnv *env, const ApiRequest *r, TokIds *out, ApiError *err) {
    if (r->kind == API_CHAT) {
        XtmlOptions opt = XTML_OPTIONS_DEFAULT;
        opt.effort = r->effort ? r->effort : env->effort;
        opt.tools = r->tools;
        if (xtml_render(env->tok, r->messages, &opt, out)) {
            const char *msg = df_errmsg();
            char field[96];
            field_of(msg, 0, field, sizeof field);
            if (r->anthropic) snprintf(field, sizeof field, "messages"); /* (the translation's own indices) */
            return api_invalid(err, "invalid_value", field, "Invalid request: %s", msg);
        }
        return 0;
    }
    if (r->prompt) {
        if (tok_encode(env->tok, r->prompt, r->prompt_len, 0, out))
            return api_error(err, 500, "server_error", NULL, "prompt", "%s", df_errmsg());
        return 0;
    }
    int vocab = tok_vocab_size(env->tok);
    for (size_t i = 0; i < json_array_size(r->prompt_ids); i++) {
        json_int_t id = json_integer_value(json_array_get(r->prompt_ids, i));
        if (id >= vocab)
            return api_invalid(err, "invalid_value", "prompt", "Invalid 'prompt': token id %lld at %zu is outside 0..%d.",
                               (long long)id, i, vocab - 1);
        tokids_push(out, (int32_t)id);
    }
    return 0;
}

/* The request's sampling, with a random seed when it gave none (logged, so that a sampled
 * answer can be reproduced). */
static int take_sampling(Exchange *x, const ExchangeEnv *env, const ApiRequest *r, ApiError *err) {
    SampleParams p = r->sample;
    memcpy(x->bias, r->bias, sizeof x->bias[0] * (size_t)p.n_bias);
    p.bias = x->bias;
    for (int i = 0; i < p.n_bias; i++)
        if (p.bias[i].token >= tok_vocab_size(env->tok))
            return api_invalid(err, "invalid_value", "logit_bias", "Invalid 'logit_bias': token id %d is outside 0..%d.",
                               p.bias[i].token, tok_vocab_size(env->tok) - 1);
    if (!r->seeded && p.temperature > 0) {
        uint64_t seed;
        if (getentropy(&seed, sizeof seed) != 0) seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)x;
        p.seed = seed;
    }
    x->seed = p.seed;
    x->sample = p;
    x->plain = p.temperature == 0 && p.presence_penalty == 0 && p.frequency_penalty == 0 && !p.n_bias && !p.logprobs;
    if (p.logprobs) {
        x->lp_content = json_array();
        x->lp_reasoning = json_array();
    }
    return 0;
}

/* 1 when the reply must have a shape (a JSON answer, a call), not only avoid calls. */
static int demands_structure(const ApiRequest *r) {
    const char *rf = json_string_value(json_object_get(r->response_format, "type"));
    const char *tc = json_string_value(r->tool_choice);
    return (rf && strcmp(rf, "text")) || json_is_object(r->tool_choice) || (tc && !strcmp(tc, "required"));
}

/* The output constraint of a chat: its grammar and a matcher at its start. Every chat has one
 * (no undeclared tool is ever called; reply_grammar.h). A reply that must have a shape needs a
 * budget that leaves room to complete it; one that only must not call tools it may not call is
 * cut at its budget like any reply (its matcher then makes no promise). */
static int constrain(Exchange *x, const ExchangeEnv *env, const ApiRequest *r, ApiError *err) {
    if (r->kind != API_CHAT || !env->trie) return 0;
    ReplySpec spec = {env->trie, r->response_format, r->tools, r->tool_choice, r->parallel_tool_calls, 1};
    if (reply_grammar(&spec, &x->grammar)) {
        char field[64];
        field_of(df_errmsg(), 1, field, sizeof field);
        return api_invalid(err, "invalid_value", field, "Invalid request: %s", df_errmsg());
    }
    if (!x->grammar) return 0;
    if (!(x->matcher = matcher_new(x->grammar, env->trie)))
        return api_error(err, 500, "server_error", NULL, NULL, "%s", df_errmsg());
    x->watch_repeat = env->repeat_stop && !demands_structure(r);
    uint32_t need = matcher_min_tokens(x->matcher);
    int64_t room = exchange_tokens_left(x, env);
    if (!demands_structure(r)) { /* free text: only forbids calls; a reply cut short is fine */
        x->unbudgeted = 1;
        return 0;
    }
    if ((int64_t)need <= room) return 0;
    return api_invalid(err, "invalid_value", x->max_new >= 0 && x->max_new < env->context ? "max_tokens" : "messages",
                       "The requested output format needs at least %u tokens to complete; only %lld are allowed "
                       "(max_tokens, or what is left of the context).",
                       need, (long long)room);
}

/* The memo key: endpoint, budget, the constraint's fields, stop sequences (bytes, each closed by
 * -1), prompt ids. (Tools are rendered into the prompt, so their ids hold them.) */
static void memo_key(Exchange *x, const ApiRequest *r) {
    tokids_push(&x->key, (int32_t)r->kind);
    tokids_push(&x->key, (int32_t)x->max_new);
    json_t *c = json_pack("{s:O?, s:O?, s:b}", "response_format", r->response_format, "tool_choice", r->tool_choice,
                          "parallel_tool_calls", r->parallel_tool_calls);
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    for (const char *p = text ? text : ""; *p; p++) tokids_push(&x->key, (unsigned char)*p);
    tokids_push(&x->key, -1);
    free(text);
    json_decref(c);
    for (int i = 0; i < r->n_stop; i++) {
        const char *seq = json_string_value(r->stop[i]);
        for (size_t b = 0; b < json_string_length(r->stop[i]); b++) tokids_push(&x->key, (unsigned char)seq[b]);
        tokids_push(&x->key, -1);
    }
    tokids_reserve(&x->key, x->prompt.n);
    memcpy(x->key.v + x->key.n, x->prompt.v, x->prompt.n * sizeof *x->prompt.v);
    x->key.n += x->prompt.n;
}

/* The budget: the request's max_tokens; a chat's answer limit when it gave none (a raw
 * completion's 256); never above K3_SERVER_MAX_TOKENS. -1: none (until the context is full). */
static int64_t budget_of(const ExchangeEnv *env, const ApiRequest *r) {
    int64_t max = r->max_tokens >= 0 ? r->max_tokens : r->kind == API_COMPLETION ? COMPLETION_DEFAULT_MAX : env->answer_tokens;
    if (env->max_tokens_cap >= 0 && (max < 0 || max > env->max_tokens_cap)) max = env->max_tokens_cap;
    return max;
}

int exchange_init(Exchange *x, const ExchangeEnv *env, const ApiRequest *r, ApiError *err) {
    memset(x, 0, sizeof *x);
    x->kind = r->kind;
    x->stop_index = -1;
    x->slot = -1;
    make_id(x, r);
    x->head.model = env->model_id;
    if (exchange_prompt(env, r, &x->prompt, err)) return -1;
    if (x->prompt.n == 0) return api_invalid(err, "invalid_value", "prompt", "Invalid 'prompt': it encodes to no tokens.");
    if (x->prompt.n > (size_t)env->context)
        return api_invalid(err, "context_length_exceeded", r->kind == API_CHAT ? "messages" : "prompt",
                           "This model's context limit is %d tokens; the prompt has %zu.", env->context, x->prompt.n);
    x->max_new = (int)budget_of(env, r);
    if (take_sampling(x, env, r, err) || constrain(x, env, r, err)) return -1;
    if (reply_init(&x->reply, env->tok, r->kind == API_CHAT)) return api_error(err, 500, "server_error", NULL, NULL, "%s", df_errmsg());
    stopseq_init(&x->stop);
    for (int i = 0; i < r->n_stop; i++) stopseq_add(&x->stop, json_string_value(r->stop[i]), json_string_length(r->stop[i]));
    memo_key(x, r);
    /* only greedy answers without log-probabilities are a function of the key alone */
    if (x->plain) x->from_memo = memo_get(env->memo, x->key.v, x->key.n, &x->replay, &x->replay_stop);
    return 0;
}

void exchange_free(Exchange *x) {
    tokids_free(&x->prompt);
    tokids_free(&x->key);
    tokids_free(&x->out);
    tokids_free(&x->replay);
    reply_free(&x->reply);
    stopseq_free(&x->stop);
    sb_free(&x->reasoning);
    sb_free(&x->content);
    if (x->job) job_done(x->job);
    matcher_free(x->matcher);
    grammar_free(x->grammar);
    json_decref(x->lp_content);
    json_decref(x->lp_reasoning);
}

/* Passes a delta's answer text through the stop filter and records what the client gets. */
static void deliver(Exchange *x, ReplyDelta *d, int last) {
    x->stop.out.n = 0;
    stopseq_push(&x->stop, d->content, d->content_len);
    if (last) stopseq_flush(&x->stop);
    d->content = x->stop.out.p;
    d->content_len = x->stop.out.n;
    sb_add(&x->reasoning, d->reasoning ? d->reasoning : "", d->reasoning_len);
    sb_add(&x->content, d->content ? d->content : "", d->content_len);
}

/* d: where the reply's held tail goes, or NULL when the reply ended itself (<|end_of_msg|>). */
static int finish(Exchange *x, const ExchangeEnv *env, const char *why, ReplyDelta *d) {
    if (!strcmp(why, "length") && !x->detail && x->kind == API_CHAT && xtml_parser_in_thinking(x->reply.parser))
        x->detail = "thinking";
    if (d) {
        reply_finish(&x->reply, d);
        deliver(x, d, 1);
    }
    x->finished = 1;
    x->finish = why;
    if (x->job) { /* done with the model: its slot is free for the next request at once */
        job_done(x->job);
        x->job = NULL;
    }
    if (!x->from_memo && x->plain)
        memo_put(env->memo, x->key.v, x->key.n, x->out.v, x->out.n, strcmp(why, "length") != 0);
    return 1;
}

int exchange_needs_model(const Exchange *x) { return !x->from_memo && x->max_new != 0; }

int exchange_start(Exchange *x, const ExchangeEnv *env, Scheduler *s) {
    int stop = x->kind == API_CHAT ? env->eos : -1;
    JobSpec spec = {x->prompt.v, x->prompt.n, x->sample, x->max_new, stop, x->matcher, x->unbudgeted};
    x->job = sched_submit(s, &spec);
    if (x->job) x->matcher = NULL; /* the job's now */
    return x->job ? 0 : -1;
}

/* The next token: replayed, or generated. 0, 1 (context full / budget / replay over), 2, -1. */
static int next_token(Exchange *x, CancelFn cancel, void *ctx, int *tok, SampleInfo *info) {
    if (x->from_memo) {
        if (x->replay_at == x->replay.n) return 1;
        *tok = x->replay.v[x->replay_at++];
        return 0;
    }
    if (!x->job) return 1; /* nothing to generate (a budget of 0) */
    int rc = job_next(x->job, tok, info, cancel, ctx);
    JobStats st = job_stats(x->job);
    x->slot = st.slot;
    x->reused = st.reused;
    x->wait_s = st.wait_s;
    x->prefill_s = st.prefill_s;
    x->model_s = st.prefill_s + st.decode_s;
    return rc;
}

/* OpenAI's {token, logprob, bytes}: the token's text (invalid UTF-8 replaced) and raw bytes. */
static json_t *logprob_entry(const Tokenizer *t, int id, float logprob) {
    size_t n;
    const uint8_t *b = tok_token_bytes(t, id, &n);
    uint8_t *text = df_malloc(utf8_sanitize(b, n, NULL) + 1);
    size_t len = utf8_sanitize(b, n, text);
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer(b[i]));
    json_t *e = json_pack("{s:s%, s:f, s:o}", "token", (const char *)text, len, "logprob", (double)logprob, "bytes", bytes);
    free(text);
    return e;
}

/* Records the log-probabilities of the token just chosen, when the client reads its text. */
static void record_logprobs(Exchange *x, const ExchangeEnv *env, int tok, const SampleInfo *info, int channel) {
    if (channel == XTML_MARKUP) return;
    int thinking = channel == XTML_THINKING;
    json_t *e = logprob_entry(env->tok, tok, info->logprob), *top = json_array();
    for (int i = 0; i < info->n_top; i++) json_array_append_new(top, logprob_entry(env->tok, info->top[i].token, info->top[i].logprob));
    json_object_set_new(e, "top_logprobs", top);
    x->lp_step_reasoning = thinking;
    json_array_append_new(thinking ? x->lp_reasoning : x->lp_content, e);
    x->lp_step = e;
}

int64_t exchange_tokens_left(const Exchange *x, const ExchangeEnv *env) {
    int64_t room = (int64_t)env->context - (int64_t)x->prompt.n - x->completion;
    if (x->max_new >= 0 && x->max_new - x->completion < room) room = x->max_new - x->completion;
    return room > 0 ? room : 0;
}

void exchange_pace(const Exchange *x, double *decode, double *prefill) {
    /* generation is lazy: after n tokens were handed out, n - 1 of them have been fed */
    *decode = x->completion >= 2 ? (x->model_s - x->prefill_s) / (x->completion - 1) : 0;
    size_t fed = x->prompt.n - x->reused;
    *prefill = x->started && fed ? x->prefill_s / (double)fed : 0;
}

const json_t *exchange_tool_calls(const Exchange *x) {
    const json_t *calls = x->kind == API_CHAT ? xtml_parser_tool_calls(x->reply.parser) : NULL;
    return json_array_size(calls) ? calls : NULL;
}

int exchange_step(Exchange *x, const ExchangeEnv *env, CancelFn cancel, void *ctx, ReplyDelta *d) {
    memset(d, 0, sizeof *d);
    x->lp_step = NULL;
    if (x->finished) return 1;
    if ((x->max_new >= 0 && x->completion >= x->max_new) || x->detail) return finish(x, env, "length", d);
    SampleInfo info;
    int tok, rc = next_token(x, cancel, ctx, &tok, &info);
    x->started = 1;
    if (rc == 1) return finish(x, env, x->from_memo && x->replay_stop ? "stop" : "length", d);
    if (rc) return rc;
    x->t_last = df_now();
    if (!x->t_first) x->t_first = x->t_last;
    tokids_push(&x->out, tok);
    int thinking = x->kind == API_CHAT && xtml_parser_in_thinking(x->reply.parser);
    if (reply_feed(&x->reply, tok, d)) return -1;
    if (d->done) {
        deliver(x, d, 1);
        return finish(x, env, exchange_tool_calls(x) ? "tool_calls" : "stop", NULL);
    }
    x->completion++;
    x->reasoning_tokens += thinking;
    if (x->lp_content) record_logprobs(x, env, tok, &info, d->channel);
    deliver(x, d, 0);
    if (x->stop.hit) {
        x->stop_index = x->stop.which;
        return finish(x, env, "stop", NULL);
    }
    if (x->watch_repeat && repeat_push(&x->repeat, tok)) x->detail = "repetition"; /* ends at the next step */
    return 0;
}

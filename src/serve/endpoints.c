/* endpoints.c - the models list, health, metrics and the generation endpoints (OpenAI's two and
 * Anthropic's Messages), whole and streamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/conn.h"
#include "serve/responses.h"
#include "serve/wire.h"
#include "util/clock.h"
#include "util/err.h"

#define STREAM_BLOCK 4096

enum MHD_Result endpoint_models(Req *q, int one) {
    const char *id = q->srv->cfg.model_id;
    if (one && strcmp(route_model_id(q->path), id)) {
        ApiError err;
        api_error(&err, 404, q->anthropic_api ? "not_found_error" : "invalid_request_error", "model_not_found", "model",
                  "The model '%.80s' does not exist; this server serves '%.128s'.", route_model_id(q->path), id);
        return conn_respond_error(q, &err);
    }
    int64_t created = (int64_t)time(NULL);
    char *body = q->anthropic_api ? anthropic_models(id, created, one) : wire_models(id, created, one);
    return conn_respond(q, 200, body, "application/json", NULL, NULL);
}

/* 200 while serving; 503 once stopping, so that a load balancer sends nothing new. */
enum MHD_Result endpoint_health(Req *q) {
    int stopping = q->srv->draining;
    json_t *h = json_pack("{s:s, s:s}", "status", stopping ? "stopping" : "ok", "model", q->srv->cfg.model_id);
    char *body = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (stopping) q->close_after = 1;
    return conn_respond(q, stopping ? 503 : 200, body ? body : df_strdup("{}"), "application/json", NULL, NULL);
}

enum MHD_Result endpoint_metrics(Req *q) {
    char *text = metrics_text(q->srv);
    return conn_respond(q, 200, text, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

void endpoint_release(Req *q) {
    if (!q->holds_gate) return;
    q->holds_gate = 0;
    gate_release(&q->srv->gate, q->seat, q->have_x && q->x.finished ? q->x.completion : -1);
}

static void count_finish(Req *q) {
    Server *srv = q->srv;
    const Exchange *x = &q->x;
    pthread_mutex_lock(&srv->stats_mu);
    srv->stats.generations++;
    srv->stats.tokens += (uint64_t)x->completion;
    srv->stats.prompt_tokens += x->prompt.n;
    srv->stats.cached_tokens += x->reused;
    double now = df_now();
    if (x->t_first) histogram_observe(&srv->stats.ttft, x->t_first - q->t0);
    if (x->completion >= 2) histogram_observe(&srv->stats.per_token, (x->t_last - x->t_first) / (x->completion - 1));
    histogram_observe(&srv->stats.e2e, now - q->t0);
    if (x->from_memo) srv->stats.memo_hits++;
    else {
        srv->stats.prefill_s += x->prefill_s;
        size_t fed = x->prompt.n - x->reused;
        srv->stats.prefill_tokens += fed;
        if (fed && x->prefill_s > 0) srv->stats.last_prefill_rate = (double)fed / x->prefill_s;
        srv->stats.decode_s += x->model_s - x->prefill_s;
        srv->stats.decode_tokens += x->completion > 1 ? (uint64_t)x->completion - 1 : 0; /* the first comes from the prefill */
    }
    pthread_mutex_unlock(&srv->stats_mu);
}

static WireUsage usage_of(const Exchange *x) {
    return (WireUsage){(int)x->prompt.n, x->completion, (int)x->reused, x->reasoning_tokens};
}

static AnthropicEnd end_of(const Exchange *x) {
    AnthropicEnd end = {x->finish, NULL, 0, x->detail};
    if (x->stop_index >= 0) end.stop_sequence = x->stop.seq[x->stop_index], end.stop_len = x->stop.len[x->stop_index];
    return end;
}

/* Tells the gate how far the generation is, for the Retry-After of those turned away. */
static void report_progress(Req *q) {
    if (!q->holds_gate) return; /* a replay from the memo */
    double decode, prefill;
    exchange_pace(&q->x, &decode, &prefill);
    gate_progress(&q->srv->gate, q->seat, exchange_tokens_left(&q->x, &q->srv->env), q->x.completion, decode, prefill);
}

static void internal_error(ApiError *err, const char *what) {
    api_error(err, 500, "server_error", NULL, NULL, "%s: %s", what, df_errmsg());
}

/* A generation the server's shutdown ended (not its client): it gets a proper ending. */
static int shutdown_cut(Req *q) {
    if (!q->srv->stopping || q->gone) return 0;
    q->cut_by_shutdown = 1;
    q->close_after = 1;
    return 1;
}

static void shutdown_error(Req *q, ApiError *err) {
    api_error(err, 503, "server_error", "server_shutdown", NULL,
              "The server is shutting down: the answer was cut after %d tokens; retry on a running server.", q->x.completion);
}

static ResponsesAnswer answer_of(const Req *q) {
    const Exchange *x = &q->x;
    return (ResponsesAnswer){x->reasoning.p, x->content.p, x->reasoning.n, x->content.n, exchange_tool_calls(x), x->finish, q->echo};
}

static char *whole_body(Req *q) {
    const Exchange *x = &q->x;
    WireUsage u = usage_of(x);
    if (q->responses) {
        ResponsesAnswer a = answer_of(q);
        return responses_object(&x->head, &a, &u);
    }
    if (q->anthropic) {
        AnthropicEnd end = end_of(x);
        return anthropic_message(&x->head, x->reasoning.p, x->reasoning.n, x->content.p, x->content.n, exchange_tool_calls(x),
                                 &end, &u);
    }
    WirePart p = {x->reasoning.p, x->content.p, x->reasoning.n, x->content.n, x->finish, exchange_tool_calls(x),
                  x->lp_content, x->lp_reasoning, 0, x->detail};
    return wire_response(&x->head, &p, &u);
}

/* The whole answer at once. The client is polled between tokens: a hang-up stops the work. */
static enum MHD_Result answer_whole(Req *q) {
    Server *srv = q->srv;
    ReplyDelta d;
    int rc;
    while ((rc = exchange_step(&q->x, &srv->env, conn_cancelled, q, &d)) == 0) report_progress(q);
    endpoint_release(q);
    conn_reset_timeout(q);
    if (rc == 2 && shutdown_cut(q)) {
        ApiError err;
        shutdown_error(q, &err);
        return conn_respond_error(q, &err);
    }
    if (rc == 2) return MHD_NO; /* gone: close without an answer */
    if (rc < 0) {
        ApiError err;
        internal_error(&err, "generation failed");
        return conn_respond_error(q, &err);
    }
    count_finish(q);
    return conn_respond(q, 200, whole_body(q), "application/json", NULL, NULL);
}

static void sse_add(Req *q, char *event) {
    sb_adds(&q->sse, event);
    free(event);
}

/* One step's text (and log-probabilities) as OpenAI chunk events. */
static void openai_step(Req *q, const ReplyDelta *d) {
    const Exchange *x = &q->x;
    json_t *lp = NULL, *none = NULL;
    if (x->lp_step) {
        lp = json_pack("[O]", x->lp_step);
        none = json_array();
    }
    if (!d->reasoning_len && !d->content_len && !lp) return;
    WirePart p = {d->reasoning, d->content, d->reasoning_len, d->content_len, NULL, NULL, NULL, NULL, q->lp_offset, NULL};
    if (lp) {
        p.lp_content = x->lp_step_reasoning ? none : lp;
        p.lp_reasoning = x->lp_step_reasoning ? lp : none;
        q->lp_offset += wire_chars(json_object_get(x->lp_step, "token"));
    }
    sse_add(q, wire_chunk(&x->head, 0, &p, q->include_usage));
    json_decref(lp), json_decref(none);
}

/* Tool calls completed since the last step, each sent as soon as it is complete. */
static void stream_tool_calls(Req *q) {
    const json_t *calls = exchange_tool_calls(&q->x);
    for (; q->calls_sent < json_array_size(calls); q->calls_sent++) {
        const json_t *call = json_array_get(calls, q->calls_sent);
        if (q->anthropic) anthropic_stream_tool(&q->ast, &q->sse, &q->x.head, q->calls_sent, call);
        else if (q->responses) responses_stream_tool(&q->rst, &q->sse, &q->x.head, q->calls_sent, call);
        else sse_add(q, wire_tool_chunks(&q->x.head, q->calls_sent, call, q->include_usage));
    }
}

static void openai_end(Req *q) {
    const Exchange *x = &q->x;
    WirePart p = {NULL, NULL, 0, 0, x->finish, NULL, NULL, NULL, 0, x->detail};
    sse_add(q, wire_chunk(&x->head, 0, &p, q->include_usage));
    if (q->include_usage) {
        WireUsage u = usage_of(x);
        sse_add(q, wire_usage_chunk(&x->head, &u));
    }
    sb_adds(&q->sse, WIRE_DONE);
}

static void failed_error(Req *q, ApiError *err) {
    (void)q;
    internal_error(err, "generation failed");
}

/* Ends a stream with an error event (and OpenAI's [DONE]): the client learns that the answer is
 * incomplete, and why. */
static int stream_error(Req *q, void (*what)(Req *q, ApiError *err)) {
    endpoint_release(q);
    conn_reset_timeout(q);
    ApiError err;
    what(q, &err);
    if (q->anthropic) anthropic_stream_error(&q->sse, &err);
    else if (q->responses) responses_stream_error(&q->rst, &q->sse, &err);
    else {
        sse_add(q, wire_error_event(&err));
        sb_adds(&q->sse, WIRE_DONE);
    }
    q->sse_state = 2;
    return 0;
}

/* Appends the next events of the stream; sets sse_state 2 after the last one is queued, or
 * returns -1 when the stream must be cut (client gone). Anthropic's message_start waits for the
 * first step, which knows how much of the prompt was cached. */
static int stream_more(Req *q) {
    Server *srv = q->srv;
    const WireHead *h = &q->x.head;
    if (q->sse_state == 0) {
        q->sse_state = 1;
        if (q->responses) {
            responses_stream_start(&q->rst, &q->sse, h, q->echo);
            return 0;
        }
        if (q->x.kind == API_CHAT && !q->anthropic) {
            WirePart p = {0};
            sse_add(q, wire_chunk(h, 1, &p, q->include_usage));
            return 0;
        }
    }
    ReplyDelta d;
    int rc = exchange_step(&q->x, &srv->env, conn_cancelled, q, &d);
    if (rc == 2 && shutdown_cut(q)) return stream_error(q, shutdown_error);
    if (rc == 2) return -1;
    WireUsage u = usage_of(&q->x);
    if (q->anthropic && q->sse_state == 1) {
        anthropic_stream_start(&q->ast, &q->sse, h, &u);
        q->sse_state = 4;
    }
    if (q->anthropic) anthropic_stream_text(&q->ast, &q->sse, d.reasoning, d.reasoning_len, d.content, d.content_len);
    else if (q->responses) responses_stream_text(&q->rst, &q->sse, h, d.reasoning, d.reasoning_len, d.content, d.content_len);
    else openai_step(q, &d);
    stream_tool_calls(q);
    if (rc == 0) {
        report_progress(q);
        return 0;
    }
    if (rc < 0) return stream_error(q, failed_error);
    endpoint_release(q);
    conn_reset_timeout(q);
    count_finish(q);
    AnthropicEnd end = end_of(&q->x);
    ResponsesAnswer a = answer_of(q);
    if (q->anthropic) anthropic_stream_end(&q->ast, &q->sse, &end, &u);
    else if (q->responses) responses_stream_end(&q->rst, &q->sse, h, &a, &u);
    else openai_end(q);
    q->sse_state = 2;
    return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    Req *q = cls;
    while (q->sse_at == q->sse.n) {
        q->sse.n = q->sse_at = 0;
        if (q->sse_state == 2 || q->sse_state == 3) {
            q->sse_state = 3;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (stream_more(q)) {
            endpoint_release(q);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = q->sse.n - q->sse_at;
    if (n > max) n = max;
    memcpy(buf, q->sse.p + q->sse_at, n);
    q->sse_at += n;
    return (ssize_t)n;
}

static enum MHD_Result answer_stream(Req *q) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, q, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return conn_queue(q, 200, resp);
}

static enum MHD_Result busy(Req *q) {
    Server *srv = q->srv;
    pthread_mutex_lock(&srv->stats_mu);
    srv->stats.busy++;
    pthread_mutex_unlock(&srv->stats_mu);
    int wait = gate_retry_after(&srv->gate);
    ApiError err;
    api_error(&err, 429, "rate_limit_error", "server_busy", NULL,
              "The model is busy (%d generations at a time%s); retry in about %d s.", srv->cfg.parallel,
              srv->cfg.queue ? " and the queue is full" : "", wait);
    char retry[16];
    snprintf(retry, sizeof retry, "%d", wait);
    char *body = q->anthropic_api ? anthropic_error(&err) : wire_error(&err);
    return conn_respond(q, 429, body, "application/json", "Retry-After", retry);
}

static int parse_request(Req *q, ApiRequest *r, ApiError *err) {
    const char *body = q->body.p ? q->body.p : "", *model = q->srv->cfg.model_id;
    if (q->route == ROUTE_MESSAGES) return anthropic_request_parse(body, q->body.n, model, 0, r, err);
    if (q->route == ROUTE_RESPONSES) return responses_request_parse(body, q->body.n, model, r, err);
    return api_request_parse(q->route == ROUTE_CHAT ? API_CHAT : API_COMPLETION, body, q->body.n, model, r, err);
}

enum MHD_Result endpoint_generate(Req *q) {
    Server *srv = q->srv;
    ApiRequest r;
    ApiError err;
    q->counted_active = 1; /* the shutdown waits for it (http.c, drain) */
    __atomic_add_fetch(&srv->active, 1, __ATOMIC_RELAXED);
    if (parse_request(q, &r, &err)) return conn_respond_error(q, &err);
    int rc = exchange_init(&q->x, &srv->env, &r, &err);
    q->have_x = 1;
    q->stream = r.stream;
    q->include_usage = r.include_usage;
    q->anthropic = r.anthropic;
    q->responses = r.responses;
    q->echo = r.echo; /* the answer repeats it */
    r.echo = NULL;
    api_request_free(&r);
    if (rc) return conn_respond_error(q, &err);
    if (exchange_needs_model(&q->x)) {
        double t0 = df_now();
        int g = gate_acquire(&srv->gate, exchange_tokens_left(&q->x, &srv->env), conn_cancelled, q, &q->seat);
        q->wait_s = df_now() - t0;
        if (g == GATE_CANCELLED && shutdown_cut(q)) {
            shutdown_error(q, &err);
            return conn_respond_error(q, &err);
        }
        if (g == GATE_CANCELLED) return MHD_NO;
        if (g == GATE_FULL) return busy(q);
        q->holds_gate = 1;
        q->seq = __atomic_add_fetch(&srv->admitted, 1, __ATOMIC_RELAXED);
        if (exchange_start(&q->x, &srv->env, srv->sched)) {
            endpoint_release(q);
            internal_error(&err, "cannot start the generation");
            return conn_respond_error(q, &err);
        }
    }
    /* generation may take longer than the idle timeout: suspend it until the answer is done */
    MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    return q->stream ? answer_stream(q) : answer_whole(q);
}

/* Anthropic's token count: the prompt ids a /v1/messages request with this body would have, the
 * number its usage reports (input_tokens plus cache_read_input_tokens). */
enum MHD_Result endpoint_count_tokens(Req *q) {
    ApiRequest r;
    ApiError err;
    const char *body = q->body.p ? q->body.p : "";
    if (anthropic_request_parse(body, q->body.n, q->srv->cfg.model_id, 1, &r, &err)) return conn_respond_error(q, &err);
    TokIds ids = {0};
    int rc = exchange_prompt(&q->srv->env, &r, &ids, &err);
    api_request_free(&r);
    size_t n = ids.n;
    tokids_free(&ids);
    if (rc) return conn_respond_error(q, &err);
    char text[48];
    snprintf(text, sizeof text, "{\"input_tokens\":%zu}", n);
    return conn_respond(q, 200, df_strdup(text), "application/json", NULL, NULL);
}

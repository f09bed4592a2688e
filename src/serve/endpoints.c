/* endpoints.c - the models list and the two generation endpoints, whole and streamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/conn.h"
#include "serve/wire.h"
#include "util/err.h"

#define STREAM_BLOCK 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum MHD_Result endpoint_models(Req *q, int one) {
    char *body = wire_models((int64_t)time(NULL));
    if (one) { /* the single model object is the list's only element */
        json_t *list = json_loads(body, 0, NULL);
        free(body);
        body = json_dumps(json_array_get(json_object_get(list, "data"), 0), JSON_COMPACT);
        json_decref(list);
    }
    return conn_respond(q, 200, body, "application/json", NULL, NULL);
}

void endpoint_release(Req *q) {
    if (!q->holds_gate) return;
    q->holds_gate = 0;
    gate_release(&q->srv->gate);
}

static void count_finish(Req *q) {
    Server *srv = q->srv;
    pthread_mutex_lock(&srv->stats_mu);
    srv->generations++;
    srv->tokens += (uint64_t)q->x.completion;
    if (q->x.from_memo) srv->memo_hits++;
    pthread_mutex_unlock(&srv->stats_mu);
}

static WireUsage usage_of(const Exchange *x) {
    return (WireUsage){(int)x->prompt.n, x->completion, (int)x->reused};
}

/* Tells the gate how far the generation is, for the Retry-After of those turned away. */
static void report_progress(Req *q) {
    if (!q->holds_gate) return; /* a replay from the memo */
    double decode, prefill;
    exchange_pace(&q->x, &decode, &prefill);
    gate_progress(&q->srv->gate, exchange_tokens_left(&q->x, &q->srv->env), decode, prefill);
}

static enum MHD_Result internal_error(Req *q, const char *what) {
    ApiError err;
    api_error(&err, 500, "server_error", NULL, NULL, "%s: %s", what, df_errmsg());
    return conn_respond_error(q, &err);
}

/* The whole answer at once. The client is polled between tokens: a hang-up stops the work. */
static enum MHD_Result answer_whole(Req *q) {
    Server *srv = q->srv;
    ReplyDelta d;
    int rc;
    while ((rc = exchange_step(&q->x, &srv->env, &srv->session, conn_cancelled, q, &d)) == 0) report_progress(q);
    endpoint_release(q);
    conn_reset_timeout(q);
    if (rc == 2) return MHD_NO; /* gone: close without an answer */
    if (rc < 0) return internal_error(q, "generation failed");
    count_finish(q);
    WireUsage u = usage_of(&q->x);
    const Exchange *x = &q->x;
    char *body = wire_response(&x->head, x->reasoning.p, x->reasoning.n, x->content.p, x->content.n, x->finish,
                               exchange_tool_calls(x), &u);
    return conn_respond(q, 200, body, "application/json", NULL, NULL);
}

static void sse_add(Req *q, char *event) {
    sb_adds(&q->sse, event);
    free(event);
}

/* Appends the next events of the stream; sets sse_state 2 after [DONE] is queued, or returns
 * -1 when the stream must be cut (client gone). */
static int stream_more(Req *q) {
    Server *srv = q->srv;
    const WireHead *h = &q->x.head;
    if (q->sse_state == 0) {
        q->sse_state = 1;
        if (q->x.kind == API_CHAT) sse_add(q, wire_chunk(h, 1, NULL, 0, NULL, 0, NULL, q->include_usage));
        return 0;
    }
    ReplyDelta d;
    int rc = exchange_step(&q->x, &srv->env, &srv->session, conn_cancelled, q, &d);
    if (rc == 2) return -1;
    if (d.reasoning_len || d.content_len)
        sse_add(q, wire_chunk(h, 0, d.reasoning, d.reasoning_len, d.content, d.content_len, NULL, q->include_usage));
    if (rc == 0) {
        report_progress(q);
        return 0;
    }
    endpoint_release(q);
    conn_reset_timeout(q);
    if (rc < 0) {
        ApiError err;
        api_error(&err, 500, "server_error", NULL, NULL, "generation failed: %s", df_errmsg());
        sse_add(q, wire_error_event(&err));
    } else {
        count_finish(q);
        const json_t *calls = exchange_tool_calls(&q->x);
        if (calls) sse_add(q, wire_tool_chunk(h, calls, q->include_usage));
        sse_add(q, wire_chunk(h, 0, NULL, 0, NULL, 0, q->x.finish, q->include_usage));
        if (q->include_usage) {
            WireUsage u = usage_of(&q->x);
            sse_add(q, wire_usage_chunk(h, &u));
        }
    }
    sb_adds(&q->sse, WIRE_DONE);
    q->sse_state = 2;
    return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    Req *q = cls;
    while (q->sse_at == q->sse.n) {
        q->sse.n = q->sse_at = 0;
        if (q->sse_state >= 2) {
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
    enum MHD_Result rc = MHD_queue_response(q->conn, 200, resp);
    MHD_destroy_response(resp);
    q->status = 200;
    q->responded = 1;
    return rc;
}

enum MHD_Result endpoint_generate(Req *q) {
    Server *srv = q->srv;
    ApiRequest r;
    ApiError err;
    if (api_request_parse(q->route == ROUTE_CHAT ? API_CHAT : API_COMPLETION, q->body.p ? q->body.p : "", q->body.n, &r, &err))
        return conn_respond_error(q, &err);
    int rc = exchange_init(&q->x, &srv->env, &r, &err);
    q->have_x = 1;
    q->stream = r.stream;
    q->include_usage = r.include_usage;
    api_request_free(&r);
    if (rc) return conn_respond_error(q, &err);
    if (!q->x.from_memo) {
        double t0 = now_s();
        int g = gate_acquire(&srv->gate, exchange_tokens_left(&q->x, &srv->env), conn_cancelled, q);
        q->wait_s = now_s() - t0;
        if (g == GATE_CANCELLED) return MHD_NO;
        if (g == GATE_FULL) {
            pthread_mutex_lock(&srv->stats_mu);
            srv->busy++;
            pthread_mutex_unlock(&srv->stats_mu);
            int wait = gate_retry_after(&srv->gate);
            api_error(&err, 429, "rate_limit_error", "server_busy", NULL,
                      "The model is busy with another request (one generation at a time%s); retry in about %d s.",
                      srv->cfg.queue ? " and the queue is full" : "", wait);
            char retry[16];
            snprintf(retry, sizeof retry, "%d", wait);
            return conn_respond(q, 429, wire_error(&err), "application/json", "Retry-After", retry);
        }
        q->holds_gate = 1;
        q->seq = ++srv->admitted;
    }
    /* generation may take longer than the idle timeout: suspend it until the answer is done */
    MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    return q->stream ? answer_stream(q) : answer_whole(q);
}

/* The server's parts without HTTP: the request memo is an LRU of exact keys, the gate admits one
 * holder, serves its bounded queue first come first served and estimates when it will be free,
 * and request validation names the offending field with OpenAI's error shape. */
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "serve/gate.h"
#include "serve/memo.h"
#include "serve/request.h"
#include "serve/stopseq.h"
#include "serve/wire.h"

static void memo_is_an_lru_of_exact_keys(void) {
    Memo *m = memo_new(2);
    int32_t k1[] = {1, 5, 7}, k2[] = {1, 5, 8}, k3[] = {2, 5, 7}, k1short[] = {1, 5};
    int32_t a[] = {10, 11, 12}, b[] = {20};
    memo_put(m, k1, 3, a, 3, 1);
    memo_put(m, k2, 3, b, 1, 0);
    TokIds out = {0};
    int stop = -1;
    CHECK(memo_get(m, k1, 3, &out, &stop) == 1);
    CHECK(out.n == 3 && out.v[0] == 10 && out.v[2] == 12 && stop == 1);
    CHECK(memo_get(m, k1short, 2, &out, &stop) == 0); /* a prefix is not the key */
    memo_put(m, k3, 3, a, 0, 0);                      /* evicts k2: k1 was used more recently */
    out.n = 0;
    CHECK(memo_get(m, k2, 3, &out, &stop) == 0);
    CHECK(memo_get(m, k1, 3, &out, &stop) == 1 && out.n == 3);
    out.n = 0;
    CHECK(memo_get(m, k3, 3, &out, &stop) == 1 && out.n == 0 && stop == 0); /* an empty answer is remembered */
    tokids_free(&out);
    memo_free(m);
    Memo *off = memo_new(0);
    memo_put(off, k1, 3, a, 3, 1);
    CHECK(memo_get(off, k1, 3, &out, &stop) == 0);
    memo_free(off);
}

typedef struct {
    Gate *g;
    int id, rc;
    int *order, *n_order;
    pthread_mutex_t *mu;
    int64_t budget;
} Waiter;

static void *wait_turn(void *arg) {
    Waiter *w = arg;
    w->rc = gate_acquire(w->g, w->budget, NULL, NULL);
    if (w->rc == GATE_OK) {
        pthread_mutex_lock(w->mu);
        w->order[(*w->n_order)++] = w->id;
        pthread_mutex_unlock(w->mu);
        gate_release(w->g);
    }
    return NULL;
}

static int cancel_now(void *ctx) { return *(int *)ctx; }

static void gate_serves_its_queue_in_arrival_order(void) {
    Gate g;
    gate_init(&g, 3);
    CHECK(gate_acquire(&g, 0, NULL, NULL) == GATE_OK);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int order[3], n = 0;
    Waiter w[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (Waiter){&g, i, -1, order, &n, &mu, 0};
        pthread_create(&th[i], NULL, wait_turn, &w[i]);
        for (int spin = 0; spin < 200 && g.waiting < i + 1; spin++) usleep(1000); /* queued in this order */
    }
    CHECK(g.waiting == 3);
    int yes = 1;
    CHECK(gate_acquire(&g, 0, cancel_now, &yes) == GATE_FULL); /* the queue is full */
    gate_release(&g);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    CHECK(n == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2);
    CHECK(!g.busy && g.waiting == 0);
    gate_destroy(&g);
}

static void gate_without_queue_refuses_and_waiters_can_leave(void) {
    Gate g;
    gate_init(&g, 0);
    CHECK(gate_acquire(&g, 0, NULL, NULL) == GATE_OK);
    CHECK(gate_acquire(&g, 0, NULL, NULL) == GATE_FULL);
    gate_release(&g);
    CHECK(gate_acquire(&g, 0, NULL, NULL) == GATE_OK);
    gate_destroy(&g);
    gate_init(&g, 1);
    CHECK(gate_acquire(&g, 0, NULL, NULL) == GATE_OK);
    int yes = 1;
    CHECK(gate_acquire(&g, 0, cancel_now, &yes) == GATE_CANCELLED); /* its client left while it waited */
    CHECK(g.waiting == 0);
    gate_release(&g);
    CHECK(!g.busy);
    gate_destroy(&g);
}

/* Retry-After: what the holder may still generate plus every waiter's budget, at the holder's
 * decode pace, else the last one measured, else the prefill pace, else 1 s a token; rounded up
 * into 1..3600. */
static void gate_estimates_when_it_will_be_free(void) {
    Gate g;
    gate_init(&g, 2);
    CHECK(gate_retry_after(&g) == 1); /* free */
    CHECK(gate_acquire(&g, 500, NULL, NULL) == GATE_OK);
    CHECK(gate_retry_after(&g) == 500); /* nothing measured yet */
    gate_progress(&g, 500, 0, 0.01);
    CHECK(gate_retry_after(&g) == 5); /* the prefill pace */
    gate_progress(&g, 299, 0.25, 0);
    CHECK(gate_retry_after(&g) == 75); /* 74.75 rounded up */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int order[2], n = 0;
    Waiter w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (Waiter){&g, i, -1, order, &n, &mu, i ? 20 : 101};
        pthread_create(&th[i], NULL, wait_turn, &w[i]);
        for (int spin = 0; spin < 200 && g.waiting < i + 1; spin++) usleep(1000);
    }
    CHECK(g.waiting == 2);
    CHECK(gate_retry_after(&g) == 105); /* (299 + 101 + 20) x 0.25 */
    gate_progress(&g, 1000000, 0, 0);   /* the pace measured is kept */
    CHECK(gate_retry_after(&g) == GATE_RETRY_MAX_S);
    gate_release(&g);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(n == 2 && !g.busy && gate_retry_after(&g) == 1);
    CHECK(gate_acquire(&g, 10, NULL, NULL) == GATE_OK);
    CHECK(gate_retry_after(&g) == 3); /* a new generation starts at the last pace: 10 x 0.25 */
    gate_release(&g);
    gate_destroy(&g);
}

/* Parses body as kind; returns the error (status 0 when accepted). */
static ApiError parse(ApiKind kind, const char *body) {
    ApiRequest r;
    ApiError e;
    memset(&e, 0, sizeof e);
    if (!api_request_parse(kind, body, strlen(body), &r, &e)) api_request_free(&r);
    return e;
}

static void validation_names_the_field(void) {
    static const struct {
        ApiKind kind;
        const char *body;
        int status;
        const char *param;
    } cases[] = {
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0, ""},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":1,"
                   "\"temperature\":null,\"max_completion_tokens\":9}", 0, ""},
        {API_CHAT, "{\"model\":\"other\",\"messages\":[]}", 404, "model"},
        {API_CHAT, "{\"messages\":[]}", 400, "model"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\"}", 400, "messages"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"top_p\":2}", 400, "top_p"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":1}]}", 400, "messages[0].role"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"stream\":1}", 400, "stream"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"max_tokens\":0}", 400, "max_tokens"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"stream\":true,"
                   "\"stream_options\":{\"include_usage\":\"yes\"}}", 400, "stream_options.include_usage"},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":[1,2,3]}", 0, ""},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":[[1,2]]}", 0, ""},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":[[1,2],[3]]}", 400, "prompt"},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":[\"a\"],\"max_tokens\":0}", 0, ""},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":\"a\",\"n\":2}", 400, "n"},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":\"a\",\"model\":\"x\"}", 400, ""},
        {API_COMPLETION, "not json", 400, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ApiError e = parse(cases[i].kind, cases[i].body);
        CHECK_MSG(e.status == cases[i].status && !strcmp(e.param, cases[i].param), "case %zu: %d '%s' (%s)", i, e.status,
                  e.param, e.message);
    }
}

/* Feeds pieces through a StopSeq and returns everything it released. */
static const char *filter(StopSeq *s, const char *const *pieces, int n, int flush) {
    static char out[256];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        s->out.n = 0;
        stopseq_push(s, pieces[i], strlen(pieces[i]));
        memcpy(out + at, s->out.p ? s->out.p : "", s->out.n);
        at += s->out.n;
    }
    if (flush) {
        s->out.n = 0;
        stopseq_flush(s);
        memcpy(out + at, s->out.p ? s->out.p : "", s->out.n);
        at += s->out.n;
    }
    out[at] = 0;
    return out;
}

static void stop_sequences_cut_across_pieces(void) {
    StopSeq s;
    stopseq_init(&s);
    stopseq_add(&s, "END", 3);
    stopseq_add(&s, "\xc3\xa9t\xc3\xa9", 5); /* "été" */
    const char *a[] = {"hello E", "N", "D world"};
    CHECK(!strcmp(filter(&s, a, 3, 1), "hello ") && s.hit);
    stopseq_free(&s);
    stopseq_init(&s);
    stopseq_add(&s, "END", 3);
    const char *b[] = {"no E", "NX here", " E"};
    CHECK(!strcmp(filter(&s, b, 3, 0), "no ENX here ")); /* " E" may still start END: held */
    CHECK(!strcmp(filter(&s, NULL, 0, 1), "E") && !s.hit);
    stopseq_free(&s);
    stopseq_init(&s);
    stopseq_add(&s, "\xc3\xa9t\xc3\xa9", 5);
    s.out.n = 0;
    stopseq_push(&s, "caf\xc3\xa9", 5); /* the é could begin "été": held whole, never split */
    CHECK(s.out.n == 3 && !memcmp(s.out.p, "caf", 3));
    const char *c[] = {"t\xc3\xa9!"};
    CHECK(!strcmp(filter(&s, c, 1, 1), "") && s.hit);
    stopseq_free(&s);
}

static void errors_have_openai_shape(void) {
    ApiError e;
    api_invalid(&e, "invalid_type", "temperature", "Invalid type for '%s'.", "temperature");
    char *s = wire_error(&e);
    json_t *j = json_loads(s, 0, NULL);
    json_t *err = json_object_get(j, "error");
    CHECK(json_object_size(j) == 1 && json_object_size(err) == 4);
    CHECK(!strcmp(json_string_value(json_object_get(err, "param")), "temperature"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "code")), "invalid_type"));
    json_decref(j);
    free(s);
    api_error(&e, 500, "server_error", NULL, NULL, "boom");
    s = wire_error(&e);
    j = json_loads(s, 0, NULL);
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "code")));
    json_decref(j);
    free(s);
}

static void tool_calls_get_ids_and_null_content(void) {
    json_t *calls = json_pack("[{s:s, s:{s:s, s:s}}]", "type", "function", "function", "name", "get_weather", "arguments",
                              "{\"city\": \"Paris\"}");
    WireHead h = {API_CHAT, "chatcmpl-x1", 1};
    WireUsage u = {10, 5, 0};
    char *s = wire_response(&h, "why", 3, "", 0, "tool_calls", calls, &u);
    json_t *j = json_loads(s, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    CHECK(json_is_null(json_object_get(msg, "content")));
    CHECK(!strcmp(json_string_value(json_object_get(call, "id")), "call_chatcmpl-x1_0"));
    CHECK(!strcmp(json_string_value(json_object_get(call, "type")), "function"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "get_weather"));
    CHECK(!json_object_get(call, "index"));
    json_decref(j);
    free(s);
    s = wire_tool_chunk(&h, calls, 0);
    CHECK(!strncmp(s, "data: {", 7) && strstr(s, "\n\n") == s + strlen(s) - 2);
    j = json_loads(s + 6, 0, NULL);
    call = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "tool_calls"), 0);
    CHECK(json_integer_value(json_object_get(call, "index")) == 0 && json_object_get(call, "id"));
    json_decref(j);
    free(s);
    json_decref(calls);
}

int main(void) {
    RUN(memo_is_an_lru_of_exact_keys);
    RUN(gate_serves_its_queue_in_arrival_order);
    RUN(gate_without_queue_refuses_and_waiters_can_leave);
    RUN(gate_estimates_when_it_will_be_free);
    RUN(validation_names_the_field);
    RUN(stop_sequences_cut_across_pieces);
    RUN(errors_have_openai_shape);
    RUN(tool_calls_get_ids_and_null_content);
    return check_summary();
}

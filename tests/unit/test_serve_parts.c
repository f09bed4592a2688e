/* The server's parts without HTTP: the request memo is an LRU of exact keys, the gate admits one
 * holder, serves its bounded queue first come first served and estimates when it will be free,
 * request validation names the offending field with OpenAI's error shape, the route table, the
 * Anthropic Messages translation and event shapes, and metrics' text format. */
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "check.h"
#include "serve/anthropic.h"
#include "serve/gate.h"
#include "serve/memo.h"
#include "serve/request.h"
#include "serve/route.h"
#include "serve/stopseq.h"
#include "serve/watchdog.h"
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
    int seat;
    w->rc = gate_acquire(w->g, w->budget, NULL, NULL, &seat);
    if (w->rc == GATE_OK) {
        pthread_mutex_lock(w->mu);
        w->order[(*w->n_order)++] = w->id;
        pthread_mutex_unlock(w->mu);
        gate_release(w->g, seat, -1);
    }
    return NULL;
}

static int cancel_now(void *ctx) { return *(int *)ctx; }

static void gate_serves_its_queue_in_arrival_order(void) {
    Gate g;
    int seat;
    gate_init(&g, 1, 3);
    CHECK(gate_acquire(&g, 0, NULL, NULL, &seat) == GATE_OK);
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
    CHECK(gate_acquire(&g, 0, cancel_now, &yes, &seat) == GATE_FULL); /* the queue is full */
    gate_release(&g, seat, -1);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    CHECK(n == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2);
    CHECK(!g.busy && g.waiting == 0);
    gate_destroy(&g);
}

static void gate_without_queue_refuses_and_waiters_can_leave(void) {
    Gate g;
    int seat;
    gate_init(&g, 1, 0);
    CHECK(gate_acquire(&g, 0, NULL, NULL, &seat) == GATE_OK);
    CHECK(gate_acquire(&g, 0, NULL, NULL, &seat) == GATE_FULL);
    gate_release(&g, seat, -1);
    CHECK(gate_acquire(&g, 0, NULL, NULL, &seat) == GATE_OK);
    gate_destroy(&g);
    gate_init(&g, 1, 1);
    CHECK(gate_acquire(&g, 0, NULL, NULL, &seat) == GATE_OK);
    int yes = 1;
    CHECK(gate_acquire(&g, 0, cancel_now, &yes, &seat) == GATE_CANCELLED); /* its client left while it waited */
    CHECK(g.waiting == 0);
    gate_release(&g, seat, -1);
    CHECK(!g.busy);
    gate_destroy(&g);
}

/* Retry-After with one seat, from measured work: before any generation finished the holder is
 * expected to generate as much again as it has (at least a token, at most its budget), after
 * that the running mean length of finished generations; at the decode pace, else the last one
 * measured, else the prefill pace, else 1 s a token; rounded up into 1..3600. A full queue
 * frees a place when the holder is done, so waiters do not add to it. */
static void gate_estimates_when_it_will_be_free(void) {
    Gate g;
    int seat;
    gate_init(&g, 1, 2);
    CHECK(gate_retry_after(&g) == 1); /* free */
    CHECK(gate_acquire(&g, 60000, NULL, NULL, &seat) == GATE_OK);
    CHECK(gate_retry_after(&g) == 1); /* nothing measured: a token at 1 s, not the budget */
    gate_progress(&g, seat, 60000, 0, 0, 0.01);
    CHECK(gate_retry_after(&g) == 1); /* the prefill pace */
    gate_progress(&g, seat, 59800, 200, 0.25, 0);
    CHECK(gate_retry_after(&g) == 50); /* as much again: 200 x 0.25 */
    gate_progress(&g, seat, 30, 59970, 0.25, 0);
    CHECK(gate_retry_after(&g) == 8); /* at most the budget left: 30 x 0.25 = 7.5 */
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
    CHECK(gate_retry_after(&g) == 8); /* the queue has room again once the holder is done */
    gate_progress(&g, seat, 1000000, 1000000, 0, 0); /* the pace measured is kept */
    CHECK(gate_retry_after(&g) == GATE_RETRY_MAX_S);
    gate_release(&g, seat, 40);   /* finished after 40 tokens; the waiters take the seat in turn */
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(n == 2 && !g.busy && gate_retry_after(&g) == 1);
    CHECK(gate_acquire(&g, 60000, NULL, NULL, &seat) == GATE_OK);
    CHECK(gate_retry_after(&g) == 10); /* the mean length at the last pace: 40 x 0.25 */
    gate_progress(&g, seat, 59990, 10, 0.25, 0);
    CHECK(gate_retry_after(&g) == 8); /* 30 more: 7.5 */
    gate_progress(&g, seat, 59900, 100, 0.25, 0);
    CHECK(gate_retry_after(&g) == 1); /* past the mean: at least one more token */
    gate_release(&g, seat, 80);     /* the mean moves a quarter of the way: 40 + (80 - 40) / 4 = 50 */
    CHECK(gate_acquire(&g, 60000, NULL, NULL, &seat) == GATE_OK);
    CHECK(gate_retry_after(&g) == 13); /* 50 x 0.25 = 12.5 */
    gate_release(&g, seat, -1);     /* cancelled: not counted */
    CHECK(gate_acquire(&g, 60000, NULL, NULL, &seat) == GATE_OK);
    CHECK(gate_retry_after(&g) == 13);
    gate_release(&g, seat, -1);
    gate_destroy(&g);
}

/* Several seats: as many holders at once, the next in line gets the first seat freed, and
 * Retry-After counts the holder expected to be done first. */
static void gate_seats_several_holders(void) {
    Gate g;
    int a, b, c;
    gate_init(&g, 2, 1);
    CHECK(gate_acquire(&g, 100, NULL, NULL, &a) == GATE_OK);
    CHECK(gate_retry_after(&g) == 1); /* a seat is still free */
    CHECK(gate_acquire(&g, 40, NULL, NULL, &b) == GATE_OK && a != b && g.busy == 2);
    gate_progress(&g, a, 60, 40, 0.5, 0);
    gate_progress(&g, b, 10, 30, 0.5, 0);
    CHECK(gate_retry_after(&g) == 5); /* b: 10 left at most, x 0.5 */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int order[1], n = 0;
    Waiter w = {&g, 7, -1, order, &n, &mu, 30};
    pthread_t th;
    pthread_create(&th, NULL, wait_turn, &w);
    for (int spin = 0; spin < 200 && g.waiting < 1; spin++) usleep(1000);
    CHECK(gate_retry_after(&g) == 5);
    int yes = 1;
    CHECK(gate_acquire(&g, 5, cancel_now, &yes, &c) == GATE_FULL);
    gate_release(&g, b, 40); /* the waiter takes b's seat, runs and leaves */
    pthread_join(th, NULL);
    CHECK(n == 1 && w.rc == GATE_OK && g.busy == 1);
    CHECK(gate_acquire(&g, 5, NULL, NULL, &c) == GATE_OK && c == b);
    gate_release(&g, a, -1), gate_release(&g, c, -1);
    CHECK(g.busy == 0);
    gate_destroy(&g);
}

/* Every connection over a limit is admitted to be answered, not dropped: over its address's
 * limit it is refused (429), over the server's with every other one busy too (503); refused
 * connections count toward neither limit; a newcomer takes the room of an idle connection, or
 * of one still waiting for its request. */
static void watchdog_answers_who_is_over_a_limit(void) {
    Watchdog w;
    WatchLimits lim = {10, 10, 10, 4, 2}; /* 4 connections, 2 per address */
    CHECK(watchdog_start(&w, &lim) == 0);
    struct sockaddr_in peer[3];
    for (int i = 0; i < 3; i++) {
        memset(&peer[i], 0, sizeof peer[i]);
        peer[i].sin_family = AF_INET;
        peer[i].sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)i); /* 10.0.0.1, .2, .3 */
    }
    int fds[8][2];
    Watch *x[8];
    static const int from[8] = {0, 0, 0, 1, 1, 2, 2, 2};
    static const WatchVerdict want[8] = {WATCH_ADMITTED, WATCH_ADMITTED, WATCH_REFUSED_CLIENT, WATCH_ADMITTED, WATCH_ADMITTED,
                                         WATCH_REFUSED_FULL, WATCH_ADMITTED, WATCH_ADMITTED};
    for (int i = 0; i < 8; i++) {
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds[i]) == 0);
        if (i == 6) watch_phase(&w, x[0], WATCH_IDLE); /* room: the idle one goes */
        x[i] = watch_add(&w, fds[i][0], (struct sockaddr *)&peer[from[i]]);
        if (i == 4)
            for (int k = 0; k < 5; k++) watch_phase(&w, x[k], WATCH_BUSY);
        CHECK_MSG(watch_verdict(&w, x[i]) == want[i], "connection %d: verdict %d, wanted %d", i, watch_verdict(&w, x[i]), want[i]);
    }
    char b;
    CHECK(recv(fds[0][1], &b, 1, MSG_DONTWAIT) == 0); /* the idle connection was shut down for 6 */
    CHECK(recv(fds[6][1], &b, 1, MSG_DONTWAIT) == 0); /* 6, still without its request, for 7 (the refused 5 is no room) */
    CHECK(recv(fds[5][1], &b, 1, MSG_DONTWAIT) == -1);
    WatchCounts n = watchdog_counts(&w);
    CHECK_MSG(n.open == 8 && n.refused_client == 1 && n.refused_full == 1 && n.evicted == 2, "open %d, refused %lu/%lu, evicted %lu",
              n.open, n.refused_client, n.refused_full, n.evicted);
    for (int i = 0; i < 8; i++) {
        watch_remove(&w, x[i]);
        close(fds[i][0]), close(fds[i][1]);
    }
    CHECK(watchdog_counts(&w).open == 0);
    watchdog_stop(&w);
}

/* Parses body as kind; returns the error (status 0 when accepted). */
static ApiError parse(ApiKind kind, const char *body) {
    ApiRequest r;
    ApiError e;
    memset(&e, 0, sizeof e);
    if (!api_request_parse(kind, body, strlen(body), "deltafin-kimi-k3", &r, &e)) api_request_free(&r);
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
        /* what stock clients send */
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"}],"
                   "\"reasoning_effort\":\"medium\",\"user\":\"u1\",\"metadata\":{\"a\":\"b\"},\"store\":false,"
                   "\"stream_options\":{\"include_usage\":true},\"parallel_tool_calls\":true,\"modalities\":[\"text\"]}", 0, ""},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"reasoning_effort\":\"none\"}", 400,
         "reasoning_effort"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"top_logprobs\":3}", 400, "top_logprobs"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"logprobs\":true,\"top_logprobs\":21}", 400,
         "top_logprobs"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"logit_bias\":{\"x\":1}}", 400, "logit_bias"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"logit_bias\":{\"5\":101}}", 400, "logit_bias"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"top_k\":-2}", 400, "top_k"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"min_p\":1.5}", 400, "min_p"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"metadata\":{\"a\":1}}", 400, "metadata"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"modalities\":[\"audio\"]}", 400, "modalities"},
        {API_CHAT, "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"store\":1}", 400, "store"},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":\"a\",\"logprobs\":6}", 400, "logprobs"},
        {API_COMPLETION, "{\"model\":\"deltafin-kimi-k3\",\"prompt\":\"a\",\"logprobs\":2,\"presence_penalty\":1.5}", 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ApiError e = parse(cases[i].kind, cases[i].body);
        CHECK_MSG(e.status == cases[i].status && !strcmp(e.param, cases[i].param), "case %zu: %d '%s' (%s)", i, e.status,
                  e.param, e.message);
    }
}

/* Sampling: greedy unless asked; truncation alone samples at temperature 1; developer is system;
 * reasoning_effort maps onto K3's levels. */
static void requests_carry_sampling_and_client_fields(void) {
    static const char *body = "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}],"
                              "\"top_p\":0.9,\"seed\":-5,\"logit_bias\":{\"7\":-100,\"9\":2.5},\"reasoning_effort\":\"high\","
                              "\"logprobs\":true,\"top_logprobs\":4}";
    ApiRequest r;
    ApiError e;
    CHECK(api_request_parse(API_CHAT, body, strlen(body), "deltafin-kimi-k3", &r, &e) == 0);
    CHECK(r.sample.temperature == 1 && r.sample.top_p == 0.9 && r.seeded && r.sample.seed == (uint64_t)-5);
    CHECK(r.sample.n_bias == 2 && r.sample.bias == r.bias);
    CHECK((r.bias[0].token == 7 && r.bias[0].bias == -100) || (r.bias[1].token == 7 && r.bias[1].bias == -100));
    CHECK(r.sample.logprobs == 1 && r.sample.top_logprobs == 4);
    CHECK(!strcmp(r.effort, "max"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(r.messages, 0), "role")), "system"));
    api_request_free(&r);
    const char *greedy = "{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\"}],\"seed\":3,\"top_p\":1}";
    CHECK(api_request_parse(API_CHAT, greedy, strlen(greedy), "deltafin-kimi-k3", &r, &e) == 0);
    CHECK(r.sample.temperature == 0); /* a seed alone, or top_p 1, does not sample */
    api_request_free(&r);
    CHECK(!strcmp(k3_effort("minimal"), "low") && !strcmp(k3_effort("low"), "low") && !strcmp(k3_effort("medium"), "high"));
    CHECK(!strcmp(k3_effort("max"), "max") && k3_effort("none") == NULL);
}

/* A NUL in a JSON string is refused in the client's terms, not in jansson's. */
static void json_nul_is_refused_plainly(void) {
    const char body[] = "{\"model\":\"deltafin-kimi-k3\",\"prompt\":\"a\\u0000b\"}";
    ApiError e = parse(API_COMPLETION, body);
    CHECK(e.status == 400 && !strcmp(e.code, "invalid_json"));
    CHECK_MSG(strstr(e.message, "NUL") && !strstr(e.message, "JSON_ALLOW_NUL"), "%s", e.message);
}

static void routes_are_exact(void) {
    Route r;
    const char *allow = NULL;
    CHECK(route_find("GET", "/v1/models", &r, &allow) == ROUTE_OK && r == ROUTE_MODELS);
    CHECK(route_find("HEAD", "/v1/models", &r, &allow) == ROUTE_OK);
    CHECK(route_find("POST", "/v1/models", &r, &allow) == ROUTE_BAD_METHOD && !strcmp(allow, "GET, HEAD"));
    CHECK(route_find("OPTIONS", "/v1/messages", &r, &allow) == ROUTE_PREFLIGHT && !strcmp(allow, "POST"));
    CHECK(route_find("POST", "/v1/messages", &r, &allow) == ROUTE_OK && r == ROUTE_MESSAGES && route_generates(r));
    CHECK(route_find("GET", "/health", &r, &allow) == ROUTE_OK && route_is_public(r));
    CHECK(route_find("GET", "/metrics", &r, &allow) == ROUTE_OK && !route_is_public(r));
    CHECK(route_find("GET", "/v1/models/", &r, &allow) == ROUTE_NOT_FOUND);
    CHECK(route_find("GET", "/v1/models%00", &r, &allow) == ROUTE_NOT_FOUND);
    CHECK(route_find("GET", "/V1/models", &r, &allow) == ROUTE_NOT_FOUND);
    char p1[] = "/v1/mo%64els", p2[] = "/v1/models%00.json", p3[] = "/a%2", p4[] = "%zz%4A%4a";
    CHECK(route_unescape(p1) == 10 && !strcmp(p1, "/v1/models"));
    CHECK(route_unescape(p2) == 18 && !strcmp(p2, "/v1/models%00.json")); /* %00 stays: no early end */
    CHECK(route_unescape(p3) == 4 && !strcmp(p3, "/a%2"));
    CHECK(route_unescape(p4) == 5 && !strcmp(p4, "%zzJJ"));
}

static ApiError parse_anthropic(const char *body, ApiRequest *r) {
    ApiError e;
    memset(&e, 0, sizeof e);
    if (anthropic_request_parse(body, strlen(body), "deltafin-kimi-k3", 0, r, &e)) memset(r, 0, sizeof *r);
    return e;
}

/* Messages become the OpenAI-shaped chat the renderer takes: system first, tool results as
 * tool messages, tool_use as tool_calls with JSON arguments, thinking as reasoning_content. */
static void anthropic_requests_translate_to_chat(void) {
    const char *body =
        "{\"model\":\"deltafin-kimi-k3\",\"max_tokens\":50,\"system\":[{\"type\":\"text\",\"text\":\"S\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],\"messages\":["
        "{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"T\",\"signature\":\"\"},"
        "{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":\"get\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"tu1\",\"content\":\"21C\"},"
        "{\"type\":\"text\",\"text\":\"thanks\"}]}],"
        "\"tools\":[{\"name\":\"get\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"auto\"},\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":5000},"
        "\"stop_sequences\":[\"END\"],\"temperature\":0.5,\"metadata\":{\"user_id\":\"u\"}}";
    ApiRequest r;
    ApiError e = parse_anthropic(body, &r);
    CHECK_MSG(e.status == 0, "%s", e.message);
    if (e.status) return;
    CHECK(r.anthropic && r.kind == API_CHAT && r.max_tokens == 50 && r.n_stop == 1 && r.sample.temperature == 0.5);
    CHECK(!strcmp(r.effort, "high"));
    CHECK(json_array_size(r.messages) == 5);
    json_t *m0 = json_array_get(r.messages, 0), *m2 = json_array_get(r.messages, 2), *m3 = json_array_get(r.messages, 3);
    CHECK(!strcmp(json_string_value(json_object_get(m0, "role")), "system") &&
          !strcmp(json_string_value(json_object_get(m0, "content")), "S"));
    CHECK(!strcmp(json_string_value(json_object_get(m2, "reasoning_content")), "T"));
    json_t *fn = json_object_get(json_array_get(json_object_get(m2, "tool_calls"), 0), "function");
    CHECK(!strcmp(json_string_value(json_object_get(fn, "arguments")), "{\"city\":\"Paris\"}"));
    CHECK(!strcmp(json_string_value(json_object_get(m3, "role")), "tool") &&
          !strcmp(json_string_value(json_object_get(m3, "tool_call_id")), "tu1"));
    CHECK(json_array_size(r.tools) == 1 &&
          json_is_object(json_object_get(json_object_get(json_array_get(r.tools, 0), "function"), "parameters")));
    api_request_free(&r);
    static const struct {
        const char *body, *says;
        int status;
    } bad[] = {
        {"{\"model\":\"deltafin-kimi-k3\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", 400},
        {"{\"model\":\"claude-x\",\"max_tokens\":5,\"messages\":[]}", "claude-x", 404},
        {"{\"model\":\"deltafin-kimi-k3\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
         "messages[0].content[0]", 400},
        {"{\"model\":\"deltafin-kimi-k3\",\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
         "messages[0].role", 400},
        {"{\"model\":\"deltafin-kimi-k3\",\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "temperature", 400},
        {"{\"model\":\"deltafin-kimi-k3\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"some\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = parse_anthropic(bad[i].body, &r);
        CHECK_MSG(e.status == bad[i].status && strstr(e.message, bad[i].says), "case %zu: %d %s", i, e.status, e.message);
        char *s = anthropic_error(&e);
        json_t *j = json_loads(s, 0, NULL);
        CHECK(!strcmp(json_string_value(json_object_get(j, "type")), "error"));
        const char *type = json_string_value(json_object_get(json_object_get(j, "error"), "type"));
        CHECK(type && !strcmp(type, bad[i].status == 404 ? "not_found_error" : "invalid_request_error"));
        json_decref(j);
        free(s);
    }
}

/* The event names of a stream, in order, and the parsed data of the one at index `at`. */
static int event_names(const char *sse, char names[][32], int max) {
    int n = 0;
    for (const char *p = strstr(sse, "event: "); p && n < max; p = strstr(p + 1, "event: ")) {
        sscanf(p + 7, "%31[a-z_]", names[n]);
        n++;
    }
    return n;
}

static void anthropic_streams_open_and_close_blocks(void) {
    StrBuf out = {0};
    AnthropicStream st;
    WireHead h = {API_CHAT, "chatcmpl-ab12", 1, "deltafin-kimi-k3"};
    WireUsage u = {30, 0, 10, 0};
    anthropic_stream_start(&st, &out, &h, &u);
    anthropic_stream_text(&st, &out, "hmm", 3, NULL, 0);
    anthropic_stream_text(&st, &out, " ok", 3, "Hi", 2);
    anthropic_stream_text(&st, &out, NULL, 0, "!", 1);
    json_t *calls = json_pack("[{s:s, s:{s:s, s:s}}]", "type", "function", "function", "name", "get", "arguments", "{\"a\": 1}");
    AnthropicEnd end = {"tool_calls", NULL, 0, NULL};
    u.completion = 7;
    anthropic_stream_tool(&st, &out, &h, 0, json_array_get(calls, 0));
    anthropic_stream_end(&st, &out, &end, &u);
    char names[32][32];
    int n = event_names(out.p, names, 32);
    const char *want[] = {"message_start", "content_block_start", "content_block_delta", "content_block_delta",
                          "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
                          "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"};
    CHECK_MSG(n == 15, "%d events", n);
    for (int i = 0; i < n && i < 15; i++) CHECK_MSG(!strcmp(names[i], want[i]), "event %d: %s", i, names[i]);
    CHECK(strstr(out.p, "\"input_tokens\":20") && strstr(out.p, "\"cache_read_input_tokens\":10"));
    CHECK(strstr(out.p, "\"stop_reason\":\"tool_use\"") && strstr(out.p, "\"output_tokens\":7"));
    CHECK(strstr(out.p, "\"partial_json\":\"{\\\"a\\\":1}\""));
    CHECK(strstr(out.p, "\"id\":\"msg_ab12\""));
    sb_free(&out);
    AnthropicEnd stop = {"stop", "END", 3, NULL};
    char *msg = anthropic_message(&h, "", 0, "x", 1, NULL, &stop, &u);
    json_t *j = json_loads(msg, 0, NULL);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")), "stop_sequence"));
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_sequence")), "END"));
    CHECK(json_array_size(json_object_get(j, "content")) == 1); /* no empty thinking block */
    json_decref(j);
    free(msg);
    json_decref(calls);
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
    WireHead h = {API_CHAT, "chatcmpl-x1", 1, "deltafin-kimi-k3"};
    WireUsage u = {10, 5, 0, 0};
    WirePart part = {"why", "", 3, 0, "tool_calls", calls, NULL, NULL, 0, NULL};
    char *s = wire_response(&h, &part, &u);
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
    /* streamed as OpenAI does: index, id, type and name with empty arguments, then the arguments */
    s = wire_tool_chunks(&h, 1, json_array_get(calls, 0), 0);
    char *second = strstr(s, "\n\ndata: {");
    CHECK(!strncmp(s, "data: {", 7) && second && strstr(second + 2, "\n\n") == s + strlen(s) - 2);
    for (int e = 0; e < 2 && second; e++) {
        j = json_loadb(e ? second + 8 : s + 6, e ? strlen(second + 8) - 2 : (size_t)(second - s - 6), 0, NULL);
        call = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "tool_calls"), 0);
        json_t *fn = json_object_get(call, "function");
        CHECK(json_integer_value(json_object_get(call, "index")) == 1);
        if (!e) CHECK(!strcmp(json_string_value(json_object_get(call, "id")), "call_chatcmpl-x1_1") &&
                      !strcmp(json_string_value(json_object_get(fn, "name")), "get_weather") &&
                      !strcmp(json_string_value(json_object_get(fn, "arguments")), ""));
        else CHECK(!json_object_get(call, "id") && !json_object_get(fn, "name") &&
                   !strcmp(json_string_value(json_object_get(fn, "arguments")), "{\"city\": \"Paris\"}"));
        json_decref(j);
    }
    free(s);
    json_decref(calls);
}

int main(void) {
    RUN(memo_is_an_lru_of_exact_keys);
    RUN(gate_serves_its_queue_in_arrival_order);
    RUN(gate_without_queue_refuses_and_waiters_can_leave);
    RUN(gate_estimates_when_it_will_be_free);
    RUN(gate_seats_several_holders);
    RUN(watchdog_answers_who_is_over_a_limit);
    RUN(validation_names_the_field);
    RUN(requests_carry_sampling_and_client_fields);
    RUN(json_nul_is_refused_plainly);
    RUN(routes_are_exact);
    RUN(anthropic_requests_translate_to_chat);
    RUN(anthropic_streams_open_and_close_blocks);
    RUN(stop_sequences_cut_across_pieces);
    RUN(errors_have_openai_shape);
    RUN(tool_calls_get_ids_and_null_content);
    return check_summary();
}

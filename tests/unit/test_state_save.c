/* A decode State saved and loaded (state_save / state_load, session_restore: chat's /save and
 * /load) is the State: bit-identical contents, the same logits for the next token, the same
 * greedy continuation as the session that never stopped; the byte count is what
 * state_saved_bytes says; a short or non-finite stream is refused and leaves an empty State. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/session.h"
#include "model_fixture.h"

static Engine *eng;
static char dir[] = "/tmp/df_state_save_XXXXXX";

typedef struct {
    unsigned char *p;
    size_t n, cap, at;
} Buf;

static int put(void *ctx, const void *p, size_t n) {
    Buf *b = ctx;
    if (b->n + n > b->cap) b->p = realloc(b->p, b->cap = 2 * (b->n + n));
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static int get(void *ctx, void *p, size_t n) {
    Buf *b = ctx;
    if (b->at + n > b->n) return df_fail("the saved state ends early");
    memcpy(p, b->p + b->at, n);
    b->at += n;
    return 0;
}

static const int prompt[] = {5, 17, 300, 42, 7, 99, 3, 250, 11, 64, 1, 2, 3};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

static void a_loaded_state_is_the_state(void) {
    const int V = eng->cat.cfg.vocab;
    State *a = state_create(eng->model), *b = state_create(eng->model);
    float *la = malloc(sizeof *la * (size_t)V), *lb = malloc(sizeof *lb * (size_t)V);
    CHECK(model_forward(eng->model, a, prompt, N_PROMPT, la, 0) == 0);
    Buf buf = {0};
    CHECK(state_save(a, put, &buf) == 0);
    CHECK_MSG(buf.n == state_saved_bytes(eng->model, N_PROMPT), "%zu vs %llu", buf.n,
              (unsigned long long)state_saved_bytes(eng->model, N_PROMPT));
    CHECK(state_load(b, N_PROMPT, get, &buf) == 0 && state_equal(a, b) && state_length(b) == N_PROMPT);
    int next = 77;
    CHECK(model_forward(eng->model, a, &next, 1, la, 0) == 0 && model_forward(eng->model, b, &next, 1, lb, 0) == 0);
    CHECK(!memcmp(la, lb, sizeof *la * (size_t)V));
    /* refusals: a stream that ends early, a value that is not finite */
    buf.at = 0, buf.n -= 4;
    CHECK(state_load(b, N_PROMPT, get, &buf) == -1 && state_length(b) == 0);
    buf.n += 4, buf.at = 0;
    float nan = NAN;
    memcpy(buf.p + buf.n / 2 / sizeof(float) * sizeof(float), &nan, sizeof nan);
    CHECK(state_load(b, N_PROMPT, get, &buf) == -1 && strstr(df_errmsg(), "not a finite number") && state_length(b) == 0);
    free(buf.p), free(la), free(lb);
    state_destroy(a), state_destroy(b);
}

/* session_restore from a saved session continues exactly as the session that kept going. */
static void a_restored_session_continues_the_same(void) {
    Session live, back;
    session_init(&live, eng);
    session_init(&back, eng);
    CHECK(session_prefill(&live, prompt, N_PROMPT, NULL, NULL, NULL) == 0);
    int tok;
    for (int i = 0; i < 6; i++) CHECK(session_next(&live, NULL, (uint64_t)i, &tok, NULL, -1, NULL, NULL) == 0);
    session_settle(&live);
    Buf buf = {0};
    CHECK(state_save(live.st, put, &buf) == 0);
    CHECK(session_restore(&back, live.held.v, live.held.n, session_pending(&live), get, &buf) == 0);
    CHECK(back.held.n == live.held.n && session_pending(&back) == session_pending(&live) && state_equal(live.st, back.st));
    /* the next prompt extends what both hold: the same reuse, the same tokens after it */
    int32_t more[64];
    size_t n = 0;
    for (size_t i = 0; i < live.held.n; i++) more[n++] = live.held.v[i];
    more[n++] = session_pending(&live);
    more[n++] = 9, more[n++] = 10;
    size_t ra = 0, rb = 0;
    CHECK(session_prefill(&live, more, n, NULL, NULL, &ra) == 0 && session_prefill(&back, more, n, NULL, NULL, &rb) == 0);
    CHECK_MSG(ra == rb && ra == live.held.n - 2 - 1, "reused %zu and %zu", ra, rb);
    for (int i = 0; i < 8; i++) {
        int x = -1, y = -1;
        CHECK(session_next(&live, NULL, (uint64_t)i, &x, NULL, -1, NULL, NULL) == 0 && session_next(&back, NULL, (uint64_t)i, &y, NULL, -1, NULL, NULL) == 0);
        CHECK_MSG(x == y, "token %d: %d vs %d", i, x, y);
    }
    free(buf.p);
    session_free(&live), session_free(&back);
}

int main(void) {
    if (!(eng = fixture_open(dir, 3))) return 1;
    RUN(a_loaded_state_is_the_state);
    RUN(a_restored_session_continues_the_same);
    fixture_close(eng, dir);
    return check_summary();
}

/* A prefill window stopped between its layers (engine_feed's cancel, model_watch_layers) leaves
 * the State exactly as it was before the window, on the CPU device: equal, field for field, to a
 * State that never saw the window, after a stop behind any layer; fed again, the window gives the
 * same logits and State, bit for bit, as one fed without a stop. The progress reports each
 * layer's share of the window. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"

static Engine *eng;
static char dir[] = "/tmp/df_window_stop_XXXXXX";

static const int prefix[] = {5, 17, 300, 42, 7, 99, 3, 250, 11, 64};
static const int window[] = {1, 2, 3, 40, 41, 42, 200, 201, 17, 5, 9, 77, 301, 302, 8, 6, 4, 2, 0, 1, 19, 23, 29, 31};
#define N_PREFIX ((size_t)(sizeof prefix / sizeof prefix[0]))
#define N_WINDOW ((size_t)(sizeof window / sizeof window[0]))

typedef struct {
    int polls, stop_at; /* the poll that answers stop (the first is before the chunk), 0: never */
    size_t last_done;
    int progress_calls;
} Watch;

static int stop_when(void *ctx) {
    Watch *w = ctx;
    return ++w->polls == w->stop_at;
}

static void progress(void *ctx, size_t done) {
    Watch *w = ctx;
    CHECK(done > w->last_done && done <= N_WINDOW);
    w->last_done = done, w->progress_calls++;
}

static int feed(State *st, const int *t, size_t n, float *rows, Watch *w) {
    FeedOptions o = {.rows = rows};
    if (w) o.cancel = stop_when, o.cancel_ctx = w, o.progress = progress, o.ctx = w;
    return engine_feed(eng, st, t, n, &o);
}

static void a_stopped_window_leaves_the_state_as_it_was(void) {
    const Model *m = engine_model(eng);
    const int layers = model_config(m)->n_layers, V = model_config(m)->vocab;
    State *a = state_create(m), *b = state_create(m);
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    CHECK(feed(a, prefix, N_PREFIX, la, NULL) == 0 && feed(b, prefix, N_PREFIX, lb, NULL) == 0);
    for (int stop = 2; stop <= layers; stop++) { /* behind layer 0 .. behind the last but one */
        Watch w = {0, stop, 0, 0};
        CHECK_MSG(feed(a, window, N_WINDOW, la, &w) == 1, "a stop behind layer %d", stop - 2);
        CHECK_MSG(state_length(a) == (int)N_PREFIX && state_equal(a, b), "the State after a stop behind layer %d", stop - 2);
        CHECK(w.progress_calls == stop - 1);
    }
    Watch w = {0, 0, 0, 0};
    CHECK(feed(a, window, N_WINDOW, la, &w) == 0 && feed(b, window, N_WINDOW, lb, NULL) == 0);
    CHECK(w.progress_calls == layers - 1); /* after each layer but the last */
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0);
    CHECK(state_equal(a, b));
    free(la), free(lb);
    state_destroy(a), state_destroy(b);
}

/* A cancel before the chunk stops nothing half way: nothing was fed. */
static void a_cancel_before_the_window_feeds_nothing(void) {
    const Model *m = engine_model(eng);
    State *a = state_create(m), *b = state_create(m);
    Watch w = {0, 1, 0, 0};
    CHECK(feed(a, window, N_WINDOW, NULL, &w) == 1 && w.progress_calls == 0 && state_length(a) == 0 && state_equal(a, b));
    state_destroy(a), state_destroy(b);
}

int main(void) {
    if (!(eng = fixture_open(dir, 5))) return 1;
    RUN(a_stopped_window_leaves_the_state_as_it_was);
    RUN(a_cancel_before_the_window_feeds_nothing);
    fixture_close(eng, dir);
    return check_summary();
}

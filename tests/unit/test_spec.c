/* Speculative decoding is lossless: verify passes with drafts that are all accepted, all
 * rejected or cut anywhere in between give the same tokens as plain greedy decoding, and leave
 * a state bit-identical (KDA conv windows and recurrent matrices, MLA cache, length) to the one
 * plain decoding leaves. Runs on a tiny synthetic checkpoint written to a temporary directory. */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "engine/generate.h"
#include "model/internal.h"
#include "synth/synth.h"
#include "util/err.h"

#define N_NEW 40

static char dir[] = "/tmp/df-spec-XXXXXX";
static Engine *eng;
static const int prompt[] = {5, 17, 300, 42, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3};
static const int n_prompt = (int)(sizeof prompt / sizeof prompt[0]);
static int ref[N_NEW], n_ref;
static State *ref_state;

typedef struct {
    int tok[N_NEW + 1], n;
} Collected;

static int collect(void *ctx, int token) {
    Collected *c = ctx;
    if (c->n <= N_NEW) c->tok[c->n++] = token;
    return 0;
}

/* Bit-for-bit comparison of two states of the same model. */
static int states_equal(const State *a, const State *b) { return state_equal(a, b); }

/* Drafts from the known greedy continuation: the first `good` tokens right, then wrong ones
 * (good = -1: always right). The position of the first error cycles with each pass when
 * `cycle` is set, so every cut point 0..8 is exercised. */
typedef struct {
    int good, cycle, calls;
    const int *truth; /* the continuation to draft from; NULL: the greedy one (ref) */
} Oracle;

static int oracle_draft(void *ctx, const int *hist, int n, int limit, int *out) {
    Oracle *o = ctx;
    int at = n - n_prompt, good = o->cycle ? o->calls % (SPEC_MAX_DRAFT + 1) : o->good;
    const int *cont = o->truth ? o->truth : ref;
    o->calls++;
    (void)hist;
    for (int i = 0; i < limit; i++) {
        int truth = at + i < n_ref ? cont[at + i] : 0;
        out[i] = (good < 0 || i < good) ? truth : (truth + 1 + i) % eng->cat.cfg.vocab;
    }
    return limit;
}

static int speculate = 1; /* K3_SPEC of the sessions run_with makes */

/* Generates through a fresh Session (sampled with sm, greedy when NULL) and copies the State it
 * leaves behind into st. */
static int run_sampled(Oracle *o, int stop_token, int max_new, Collected *got, GenResult *res, State *st, Sampler *sm) {
    Session s;
    session_init(&s, eng);
    s.spec.on = speculate;
    if (o) s.spec.source = oracle_draft, s.spec.source_ctx = o;
    GenOptions opt = {max_new, stop_token, NULL, NULL, sm};
    int rc = generate(&s, prompt, (size_t)n_prompt, &opt, collect, got, res);
    if (!rc) rc = state_copy(st, s.st);
    session_free(&s);
    return rc;
}

static int run_with(Oracle *o, int stop_token, int max_new, Collected *got, GenResult *res, State *st) {
    return run_sampled(o, stop_token, max_new, got, res, st, NULL);
}

static void test_reference(void) {
    speculate = 0;
    Collected got = {{0}, 0};
    GenResult res;
    ref_state = state_create(eng->model);
    CHECK(run_with(NULL, -1, N_NEW, &got, &res, ref_state) == 0);
    CHECK(res.generated == N_NEW && res.spec.verifies == 0);
    memcpy(ref, got.tok, sizeof ref);
    n_ref = got.n;
    speculate = 1;
}

/* expect: 1 = most drafts accepted, 0 = none, -1 = some but not all */
static void check_case(Oracle o, int expect) {
    Collected got = {{0}, 0};
    GenResult res;
    State *st = state_create(eng->model);
    CHECK(run_with(&o, -1, N_NEW, &got, &res, st) == 0);
    CHECK(got.n == N_NEW && memcmp(got.tok, ref, sizeof ref) == 0);
    CHECK(states_equal(st, ref_state));
    CHECK(res.spec.verifies > 0);
    if (expect == 1) CHECK_MSG((double)(N_NEW - 1) / res.spec.passes > 4, "%llu passes", (unsigned long long)res.spec.passes);
    else if (expect == 0) CHECK(res.spec.accepted == 0);
    else CHECK(res.spec.accepted > 0 && res.spec.accepted < res.spec.drafted);
    state_destroy(st);
}

static void test_all_accepted(void) { check_case((Oracle){-1, 0, 0, NULL}, 1); }
static void test_all_rejected(void) { check_case((Oracle){0, 0, 0, NULL}, 0); }

static void test_every_cut_point(void) {
    check_case((Oracle){0, 1, 0, NULL}, -1);
    for (int good = 1; good < SPEC_MAX_DRAFT; good += 3) check_case((Oracle){good, 0, 0, NULL}, -1);
}

/* The n-gram drafter on the real text, with repetitive and ordinary prompts. */
static void test_ngram_drafts(void) {
    Collected got = {{0}, 0};
    GenResult res;
    State *st = state_create(eng->model);
    CHECK(run_with(NULL, -1, N_NEW, &got, &res, st) == 0);
    CHECK(memcmp(got.tok, ref, sizeof ref) == 0);
    CHECK(states_equal(st, ref_state));
    state_destroy(st);
}

/* Stops inside an accepted run (stop token, max_new) keep only what was emitted. */
static void test_stops_inside_a_pass(void) {
    for (int cut = 3; cut < N_NEW; cut += 7) {
        speculate = 0;
        Collected a = {{0}, 0}, b = {{0}, 0};
        GenResult ra, rb;
        State *sa = state_create(eng->model), *sb = state_create(eng->model);
        CHECK(run_with(NULL, ref[cut], N_NEW, &a, &ra, sa) == 0);
        speculate = 1;
        Oracle o = {-1, 0, 0, NULL};
        CHECK(run_with(&o, ref[cut], N_NEW, &b, &rb, sb) == 0);
        CHECK(a.n == b.n && memcmp(a.tok, b.tok, sizeof(int) * (size_t)a.n) == 0 && ra.hit_stop == rb.hit_stop);
        CHECK(states_equal(sa, sb));
        state_reset(sa), state_reset(sb);
        Oracle o2 = {-1, 0, 0, NULL};
        CHECK(run_with(&o2, -1, cut, &b, &rb, sb) == 0);
        speculate = 0;
        CHECK(run_with(NULL, -1, cut, &a, &ra, sa) == 0);
        speculate = 1;
        CHECK(rb.generated == cut && states_equal(sa, sb));
        state_destroy(sa), state_destroy(sb);
    }
}

/* Sampled decoding: drafts are checked with the sampler's own choice at each row's position,
 * so drafts cut anywhere give exactly the sampled tokens (and State) of plain decoding. */
static void test_sampled_with_drafts(void) {
    const SampleParams params = {0.9, 0.95, 0, 0, 0, 0, 1234, 0, 0, NULL, 0, 0, 0};
    Sampler sm;
    Collected want = {{0}, 0};
    GenResult res;
    State *plain = state_create(eng->model);
    speculate = 0;
    CHECK(sampler_init(&sm, &params, eng->cat.cfg.vocab) == 0);
    CHECK(run_sampled(NULL, -1, N_NEW, &want, &res, plain, &sm) == 0);
    sampler_free(&sm);
    speculate = 1;
    CHECK(want.n == N_NEW && memcmp(want.tok, ref, sizeof ref) != 0); /* sampling changed the text */
    for (int good = -1; good < SPEC_MAX_DRAFT; good += 2) {
        Oracle o = {good < 0 ? 0 : good, good < 0, 0, want.tok};
        Collected got = {{0}, 0};
        State *st = state_create(eng->model);
        CHECK(sampler_init(&sm, &params, eng->cat.cfg.vocab) == 0);
        CHECK(run_sampled(&o, -1, N_NEW, &got, &res, st, &sm) == 0);
        CHECK_MSG(got.n == N_NEW && memcmp(got.tok, want.tok, sizeof want.tok[0] * N_NEW) == 0, "cut %d", good);
        CHECK(states_equal(st, plain));
        CHECK(res.spec.accepted > 0 || good == 0);
        sampler_free(&sm);
        state_destroy(st);
    }
    state_destroy(plain);
}

/* A forced rejection, directly: verify [t, wrong...], keep one row; the state and the next
 * step's logits equal those of plain decoding. */
static void test_forced_rejection(void) {
    const int V = eng->cat.cfg.vocab;
    State *a = state_create(eng->model), *b = state_create(eng->model);
    float *la = malloc(sizeof(float) * (size_t)V * MODEL_MAX_VERIFY), *lb = malloc(sizeof(float) * (size_t)V);
    CHECK(model_forward(eng->model, a, prompt, n_prompt, NULL, 0) == 0);
    CHECK(state_copy(b, a) == 0);
    int in[MODEL_MAX_VERIFY] = {ref[0]};
    for (int i = 1; i < MODEL_MAX_VERIFY; i++) in[i] = (ref[i] + 5) % V;
    CHECK(model_forward_verify(eng->model, a, in, MODEL_MAX_VERIFY, la) == 0);
    CHECK(model_forward(eng->model, b, &ref[0], 1, lb, 0) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0); /* row 0 of the verify = the plain step */
    CHECK(!states_equal(a, b));
    state_commit(a, 1);
    CHECK(states_equal(a, b));
    CHECK(model_forward(eng->model, a, &ref[1], 1, la, 0) == 0);
    CHECK(model_forward(eng->model, b, &ref[1], 1, lb, 0) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0);
    CHECK(model_forward_verify(eng->model, a, in, MODEL_MAX_VERIFY + 1, la) != 0); /* too many rows */
    state_destroy(a), state_destroy(b);
    free(la), free(lb);
}

/* The server/chat Session: two turns (the second extends the first, its reply's last pick
 * unfed), drafts from a perfect oracle cut after `good` tokens; tokens, held tokens and the
 * State must match K3_SPEC=0 exactly. */
typedef struct {
    const int32_t *text;
    size_t n;
    int good;
} TextOracle;

static int text_draft(void *ctx, const int *hist, int n, int limit, int *out) {
    TextOracle *o = ctx;
    if ((size_t)n >= o->n || memcmp(hist, o->text, sizeof(int) * (size_t)n) != 0) return 0;
    int d = 0;
    for (; d < limit && (size_t)(n + d) < o->n; d++) out[d] = d < o->good ? o->text[n + d] : (o->text[n + d] + 1) % eng->cat.cfg.vocab;
    return d;
}

/* Runs the two turns; returns the picks (turn 1 then turn 2) in picks[], the count. */
static int two_turns(Session *s, int32_t *picks) {
    int n = 0, tok;
    CHECK(session_prefill(s, prompt, (size_t)n_prompt, NULL, NULL, NULL) == 0);
    for (int i = 0; i < 13; i++) {
        CHECK(session_next(s, NULL, 0, &tok, NULL, -1, NULL, NULL) == 0);
        picks[n++] = tok;
    }
    int32_t turn2[64];
    size_t m = s->held.n;
    memcpy(turn2, s->held.v, sizeof(int32_t) * m);
    turn2[m++] = session_pending(s);
    turn2[m++] = 9, turn2[m++] = 8, turn2[m++] = 7;
    size_t reused = 0;
    CHECK(session_prefill(s, turn2, m, NULL, NULL, &reused) == 0);
    CHECK(reused == m - 4);
    for (int i = 0; i < 11; i++) {
        CHECK(session_next(s, NULL, 0, &tok, NULL, -1, NULL, NULL) == 0);
        picks[n++] = tok;
    }
    return n;
}

static void test_session(void) {
    for (int good = 0; good <= SPEC_MAX_DRAFT; good += 2) {
        Session plain, spec;
        int32_t want[32], got[32], text[96];
        session_init(&plain, eng);
        session_init(&spec, eng);
        plain.spec.on = 0;
        int n = two_turns(&plain, want);
        size_t n_text = plain.held.n;
        memcpy(text, plain.held.v, sizeof(int32_t) * n_text);
        text[n_text++] = session_pending(&plain);
        TextOracle o = {text, n_text, good};
        spec.spec.source = text_draft, spec.spec.source_ctx = &o;
        CHECK(two_turns(&spec, got) == n && memcmp(got, want, sizeof(int32_t) * (size_t)n) == 0);
        CHECK(session_pending(&spec) == session_pending(&plain));
        CHECK(spec.spec.verifies > 0);
        if (good == SPEC_MAX_DRAFT) CHECK(spec.spec.passes < (uint64_t)n / 3);
        /* the State runs ahead of the held tokens until the next feed cuts it back */
        CHECK(session_commit(&spec) == 0 && session_commit(&plain) == 0);
        CHECK(spec.held.n == plain.held.n && memcmp(spec.held.v, plain.held.v, sizeof(int32_t) * plain.held.n) == 0);
        int32_t turn3[96];
        size_t m = plain.held.n;
        memcpy(turn3, plain.held.v, sizeof(int32_t) * m);
        turn3[m++] = 5, turn3[m++] = 6;
        CHECK(session_prefill(&spec, turn3, m, NULL, NULL, NULL) == 0 && session_prefill(&plain, turn3, m, NULL, NULL, NULL) == 0);
        CHECK(states_equal(spec.st, plain.st));
        int t1 = -1, t2 = -2;
        CHECK(session_next(&spec, NULL, 0, &t1, NULL, -1, NULL, NULL) == 0 && session_next(&plain, NULL, 0, &t2, NULL, -1, NULL, NULL) == 0 && t1 == t2);
        session_free(&spec), session_free(&plain);
    }
}

/* The Session with a sampler: drafts verified at each row's completion position give the
 * sampled picks of plain decoding, whatever the drafts. */
static void sampled_picks(Session *s, int n, int32_t *picks) {
    const SampleParams params = {1.0, 0.9, 0, 0, 0, 0, 77, 0, 0, NULL, 0, 0, 0};
    Sampler sm;
    CHECK(sampler_init(&sm, &params, eng->cat.cfg.vocab) == 0);
    CHECK(session_prefill(s, prompt, (size_t)n_prompt, NULL, NULL, NULL) == 0);
    for (int i = 0; i < n; i++) {
        int tok;
        CHECK(session_next(s, &sm, (uint64_t)i, &tok, NULL, -1, NULL, NULL) == 0);
        picks[i] = tok;
    }
    CHECK(session_commit(s) == 0);
    sampler_free(&sm);
}

static void test_session_sampled(void) {
    for (int good = 1; good <= SPEC_MAX_DRAFT; good += 3) {
        Session plain, spec;
        int32_t want[24], got[24], text[64];
        session_init(&plain, eng);
        session_init(&spec, eng);
        plain.spec.on = 0;
        sampled_picks(&plain, 24, want);
        memcpy(text, plain.held.v, sizeof(int32_t) * plain.held.n);
        TextOracle o = {text, plain.held.n, good};
        spec.spec.source = text_draft, spec.spec.source_ctx = &o;
        sampled_picks(&spec, 24, got);
        CHECK_MSG(memcmp(got, want, sizeof want) == 0, "good %d", good);
        CHECK(spec.spec.accepted > 0);
        CHECK(states_equal(spec.st, plain.st));
        session_free(&spec), session_free(&plain);
    }
}

int main(void) {
    if (!(eng = fixture_open(dir, 7))) return 1;
    RUN(test_reference);
    RUN(test_all_accepted);
    RUN(test_all_rejected);
    RUN(test_every_cut_point);
    RUN(test_ngram_drafts);
    RUN(test_stops_inside_a_pass);
    RUN(test_sampled_with_drafts);
    RUN(test_forced_rejection);
    RUN(test_session);
    RUN(test_session_sampled);
    state_destroy(ref_state);
    fixture_close(eng, dir);
    return check_summary();
}

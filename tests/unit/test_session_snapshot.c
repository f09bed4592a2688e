/* The Session's prompt-boundary snapshot (K3_PROMPT_SNAPSHOT): a prompt that extends the previous
 * prompt but not the reply given to it continues from the snapshot, and the State it reaches is
 * bit-identical to that of a session that was fed the same prompts without replying (same
 * chunks), with the same greedy tokens as a full prefill; the live tokens win when they are the
 * longer prefix; a cancelled prefill keeps what it fed and the snapshot; the streaming memory
 * plan counts the second State. Runs on a tiny synthetic checkpoint written to a temporary directory. */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "engine/session.h"
#include "synth/synth.h"
#include "util/err.h"

#define N_REPLY 7

static char dir[] = "/tmp/df-snapshot-XXXXXX";
static Engine *eng;

/* turn 1's prompt, and what turn 2 appends to it instead of the reply (a resent history) */
static const int32_t p1[] = {5, 17, 300, 42, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3, 88, 21, 4, 250};
static const int32_t p2_tail[] = {11, 12, 13, 400, 8, 8, 9};
#define N1 (sizeof p1 / sizeof p1[0])
#define N2 (N1 + sizeof p2_tail / sizeof p2_tail[0])
static int32_t p2[N2];

static void open_session(Session *s, int snapshot) {
    session_init(s, eng);
    if (snapshot) session_keep_snapshots(s);
}

/* Prefills and generates n greedy tokens into out. Returns the prompt tokens reused. */
static size_t answer(Session *s, const int32_t *prompt, size_t n_prompt, int n, int32_t *out) {
    size_t reused = 99999;
    CHECK(session_prefill(s, prompt, n_prompt, NULL, NULL, &reused) == 0);
    for (int i = 0; i < n; i++) {
        int tok = -1;
        CHECK(session_next(s, NULL, 0, &tok, NULL, -1, NULL, NULL) == 0);
        out[i] = tok;
    }
    return reused;
}

static void test_resent_history_continues_from_the_snapshot(void) {
    Session snap, fed, plain;
    open_session(&snap, 1), open_session(&fed, 0), open_session(&plain, 0);
    int32_t reply[N_REPLY], got[N_REPLY], want[N_REPLY], ref[N_REPLY];
    CHECK(answer(&snap, p1, N1, N_REPLY, reply) == 0);
    CHECK(answer(&plain, p1, N1, N_REPLY, ref) == 0 && memcmp(reply, ref, sizeof reply) == 0);
    CHECK(answer(&fed, p1, N1, 0, NULL) == 0);
    /* turn 2: the snapshot is restored; `fed` continues its live tokens through the same chunks */
    CHECK(answer(&snap, p2, N2, N_REPLY, got) == N1);
    CHECK(answer(&fed, p2, N2, 0, NULL) == N1);
    CHECK(answer(&plain, p2, N2, N_REPLY, ref) == 0); /* the reply is in the way: all fed again */
    CHECK(memcmp(got, ref, sizeof got) == 0);
    CHECK(snap.snap_held.n == N2 && memcmp(snap.snap_held.v, p2, sizeof p2) == 0);
    CHECK(state_equal(snap.snap, fed.st));
    for (int i = 0; i < N_REPLY; i++) {
        int tok = -1;
        CHECK(session_next(&fed, NULL, 0, &tok, NULL, -1, NULL, NULL) == 0);
        want[i] = tok;
    }
    CHECK(memcmp(got, want, sizeof got) == 0);
    session_free(&snap), session_free(&fed), session_free(&plain);
}

/* A prompt that continues the reply itself (the client sent the reasoning back) keeps the live
 * tokens, which are longer than the snapshot's. */
static void test_live_tokens_win_when_longer(void) {
    Session s;
    open_session(&s, 1);
    int32_t reply[N_REPLY];
    answer(&s, p1, N1, N_REPLY, reply);
    int32_t p3[N1 + N_REPLY + 2];
    memcpy(p3, p1, sizeof p1);
    memcpy(p3 + N1, reply, sizeof reply);
    p3[N1 + N_REPLY] = 31, p3[N1 + N_REPLY + 1] = 32;
    size_t held = s.held.n; /* the last pick is not fed yet */
    CHECK(held == N1 + N_REPLY - 1);
    CHECK(answer(&s, p3, N1 + N_REPLY + 2, 0, NULL) == held);
    CHECK(s.snap_held.n == N1 + N_REPLY + 2);
    session_free(&s);
}

/* Cancels once the first chunk of the feed is in: the session holds more than it did (the cancel
 * is also polled between a chunk's layers, where a stop would undo the chunk). */
typedef struct {
    const Session *s;
    size_t held;
} AfterFirstChunk;

static int cancel_after_first_chunk(void *ctx) {
    const AfterFirstChunk *a = ctx;
    return a->s->held.n > a->held;
}

/* A long prompt cancelled after its first chunk keeps what it fed: held is that prefix (the
 * short chunk goes first) and the State is bit-identical to one fed just those tokens through
 * the same chunks; the snapshot is kept. The same prompt asked again continues from the kept
 * prefix and answers as a fresh session does. A prompt equal to the snapshot's (nothing left to
 * feed) is fed again whole. */
static void test_cancel_keeps_what_was_fed(void) {
    Session s, fresh, ref;
    open_session(&s, 1), open_session(&fresh, 0), open_session(&ref, 0);
    int32_t reply[N_REPLY], got[N_REPLY], want[N_REPLY];
    answer(&s, p1, N1, N_REPLY, reply);
    int32_t big[N1 + 100];
    memcpy(big, p1, sizeof p1);
    for (int i = 0; i < 100; i++) big[N1 + i] = 50 + i * 7 % 300;
    size_t reused = 0, first = 100 % MODEL_BATCH_ROWS;
    AfterFirstChunk after = {&s, N1};
    CHECK(session_prefill(&s, big, N1 + 100, cancel_after_first_chunk, &after, &reused) == 1);
    CHECK(reused == N1 && s.held.n == N1 + first && !memcmp(s.held.v, big, s.held.n * sizeof *big));
    CHECK(state_length(s.st) == (int)(N1 + first) && session_pending(&s) < 0);
    CHECK(s.snap_held.n == N1 && !memcmp(s.snap_held.v, p1, sizeof p1));
    answer(&ref, p1, N1, 0, NULL);
    answer(&ref, big, N1 + first, 0, NULL);
    CHECK(state_equal(s.st, ref.st));
    CHECK(answer(&s, big, N1 + 100, N_REPLY, got) == N1 + first);
    CHECK(answer(&fresh, big, N1 + 100, N_REPLY, want) == 0 && memcmp(got, want, sizeof got) == 0);
    CHECK(answer(&s, big, N1 + 100, N_REPLY, got) == 0 && memcmp(got, want, sizeof got) == 0);
    session_free(&s), session_free(&fresh), session_free(&ref);
}

/* The streaming plan's fixed needs grow by at least what a State holding the planned context
 * takes (the KDA matrices and windows, the MLA cache rows in the engine's cache layout, counted
 * here independently), by exactly what the model and the Session say the snapshot allocates, and
 * the expert cache never grows. */
static void test_memory_plan_counts_the_snapshot(void) {
    EngineOptions o = fixture_options();
    o.store.kind = STORE_STREAM;
    o.store.ram_bytes = 2000000000;
    o.context = 300;
    Engine *one, *two;
    CHECK((one = engine_open(dir, &o)) != NULL);
    o.extra_states = 1;
    CHECK((two = engine_open(dir, &o)) != NULL);
    const K3Config *c = &one->cat.cfg;
    uint64_t kda = 4 * ((uint64_t)3 * config_kda_width(c) * (uint64_t)(c->conv_kernel - 1) +
                        (uint64_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim);
    uint64_t state = (uint64_t)c->n_kda_layers * kda + model_mla_bytes_per_position(c, one->opt.mla_cache) * 300;
    const StreamPlan *a = &one->stream.plan, *b = &two->stream.plan;
    CHECK_MSG(b->fixed >= a->fixed + state, "fixed %llu -> %llu, a State is %llu", (unsigned long long)a->fixed,
              (unsigned long long)b->fixed, (unsigned long long)state);
    uint64_t snapshot = model_memory(c, one->opt.mla_cache, 300, 0).state + session_bytes(c, 300, 1) - session_bytes(c, 300, 0);
    CHECK(b->fixed - a->fixed == snapshot);
    CHECK(b->slots <= a->slots);
    engine_close(one), engine_close(two);
}

/* Slots: the plan counts every slot's States and Session and a pass's logits; AUTO takes as many
 * slots as a quarter of the budget holds (at most 8). */
static void test_memory_plan_counts_the_slots(void) {
    EngineOptions o = fixture_options();
    o.store.kind = STORE_STREAM;
    o.store.ram_bytes = 2000000000;
    o.context = 300;
    o.extra_states = 1;
    Engine *one, *three;
    CHECK((one = engine_open(dir, &o)) != NULL);
    o.slots = 3;
    CHECK((three = engine_open(dir, &o)) != NULL);
    const K3Config cfg = one->cat.cfg, *c = &cfg;
    MlaCacheMode mla = one->opt.mla_cache;
    uint64_t slot = 2 * model_memory(c, mla, 300, 0).state + session_bytes(c, 300, 1);
    uint64_t pass = sizeof(float) * (uint64_t)c->vocab * MODEL_BATCH_ROWS;
    CHECK(one->slots == 1 && three->slots == 3);
    CHECK(three->stream.plan.fixed - one->stream.plan.fixed == 2 * slot + pass);
    engine_close(one), engine_close(three);
    /* a budget that holds 2.x slots in its quarter gets 2; a large one stops at 8 */
    o.slots = ENGINE_SLOTS_AUTO;
    o.context = 60000;
    uint64_t big_slot = 2 * model_memory(c, mla, 60000, 0).state + session_bytes(c, 60000, 1);
    o.store.ram_bytes = 4 * big_slot * 5 / 2;
    Engine *a, *b;
    CHECK((a = engine_open(dir, &o)) != NULL && a->slots == 2);
    o.store.ram_bytes = 4 * big_slot * 20;
    CHECK((b = engine_open(dir, &o)) != NULL && b->slots == ENGINE_SLOTS_AUTO_MAX);
    engine_close(a), engine_close(b);
}

int main(void) {
    if (!(eng = fixture_open(dir, 7))) return 1;
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + N1, p2_tail, sizeof p2_tail);
    RUN(test_resent_history_continues_from_the_snapshot);
    RUN(test_live_tokens_win_when_longer);
    RUN(test_cancel_keeps_what_was_fed);
    RUN(test_memory_plan_counts_the_snapshot);
    RUN(test_memory_plan_counts_the_slots);
    fixture_close(eng, dir);
    return check_summary();
}

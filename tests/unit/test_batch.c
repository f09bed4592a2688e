/* Several sequences in one forward pass (model_forward_batch) give each sequence exactly what it
 * gets alone: the same logits bit for bit at every step, hence the same greedy tokens, and the
 * same State (KDA windows and recurrent matrices, MLA cache) afterwards. Checked for decode
 * steps of several sequences, a prefill chunk riding along with decode rows, sequences that
 * join and leave, both MLA cache layouts, and one and two threads. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"
#include "model/internal.h"

#define N_SEQ 4
#define STEPS 12

static char dir[] = "/tmp/df-batch-XXXXXX";
static Engine *eng;

static const int prompts[N_SEQ][20] = {
    {5, 17, 300, 42, 42, 42, 7, 100, 3, 9, 12, 60, 77, 1, 2, 3},
    {9, 8, 7},
    {400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418},
    {1},
};
static const int prompt_len[N_SEQ] = {16, 3, 19, 1};

typedef struct {
    int tokens[STEPS + 1];
    float *logits; /* [STEPS + 1][vocab]: after the prompt, then after each decode step */
    State *st;
} Alone;

static float *row(float *logits, int i) { return logits + (size_t)i * eng->cat.cfg.vocab; }

/* A sequence alone: prefill, then greedy decode steps. */
static void run_alone(int q, Alone *a) {
    a->logits = malloc(sizeof(float) * (size_t)eng->cat.cfg.vocab * (STEPS + 1));
    a->st = state_create(eng->model);
    CHECK(model_forward(eng->model, a->st, prompts[q], prompt_len[q], row(a->logits, 0), 0) == 0);
    for (int i = 0; i < STEPS; i++) {
        a->tokens[i] = model_argmax(eng->model, row(a->logits, i));
        CHECK(model_forward(eng->model, a->st, &a->tokens[i], 1, row(a->logits, i + 1), 0) == 0);
    }
}

static void free_alone(Alone *a) {
    free(a->logits);
    state_destroy(a->st);
}

/* Every sequence prefilled in one pass, then decode steps of all of them together; sequence 3
 * joins late (its prompt rides along with the others' decode rows) and sequence 1 leaves early. */
static void batched_matches_alone(void) {
    const int V = eng->cat.cfg.vocab;
    Alone alone[N_SEQ];
    for (int q = 0; q < N_SEQ; q++) run_alone(q, &alone[q]);
    State *st[N_SEQ];
    int step[N_SEQ] = {0}, last[N_SEQ];
    float *logits = malloc(sizeof(float) * (size_t)V * MODEL_BATCH_ROWS);
    for (int q = 0; q < N_SEQ; q++) st[q] = state_create(eng->model);
    /* pass 0: prompts of sequences 0..2 together */
    int tokens[MODEL_BATCH_ROWS], rows[N_SEQ], n = 0, T = 0;
    State *in[N_SEQ];
    for (int q = 0; q < 3; q++) {
        memcpy(tokens + T, prompts[q], sizeof(int) * (size_t)prompt_len[q]);
        T += prompt_len[q];
        in[n] = st[q], rows[n++] = prompt_len[q];
    }
    CHECK(model_forward_batch(eng->model, in, tokens, rows, n, logits, 0) == 0);
    for (int q = 0; q < 3; q++) CHECK_MSG(!memcmp(row(logits, q), row(alone[q].logits, 0), sizeof(float) * (size_t)V), "prefill of %d", q);
    for (int q = 0; q < 3; q++) last[q] = model_argmax(eng->model, row(logits, q));
    int mismatches = 0;
    for (int pass = 1; pass < 100; pass++) {
        n = T = 0;
        int who[N_SEQ];
        for (int q = 0; q < N_SEQ; q++) {
            if (q == 3 && pass < 4) continue;          /* joins at pass 4 with its prompt */
            if (q == 1 && step[q] >= STEPS - 5) continue; /* leaves early */
            if (step[q] >= STEPS) continue;
            if (q == 3 && step[q] == 0 && !st[q]->len) {
                memcpy(tokens + T, prompts[3], sizeof(int) * (size_t)prompt_len[3]);
                rows[n] = prompt_len[3], T += prompt_len[3];
            } else {
                CHECK(last[q] == alone[q].tokens[step[q]]);
                tokens[T++] = last[q];
                rows[n] = 1;
            }
            who[n] = q, in[n++] = st[q];
        }
        if (!n) break;
        CHECK(model_forward_batch(eng->model, in, tokens, rows, n, logits, 0) == 0);
        for (int i = 0; i < n; i++) {
            int q = who[i], at = st[q]->len == prompt_len[q] ? 0 : ++step[q];
            if (q == 3 && at == 0) { /* its prompt pass */
                mismatches += memcmp(row(logits, i), row(alone[q].logits, 0), sizeof(float) * (size_t)V) != 0;
            } else
                mismatches += memcmp(row(logits, i), row(alone[q].logits, at), sizeof(float) * (size_t)V) != 0;
            last[q] = model_argmax(eng->model, row(logits, i));
        }
    }
    CHECK_MSG(mismatches == 0, "%d rows differ from the sequence alone", mismatches);
    for (int q = 0; q < N_SEQ; q++) {
        if (q == 1) continue; /* stopped early: compare its length only */
        CHECK_MSG(state_equal(st[q], alone[q].st), "state of %d", q);
    }
    CHECK(st[1]->len == prompt_len[1] + STEPS - 5);
    for (int q = 0; q < N_SEQ; q++) state_destroy(st[q]), free_alone(&alone[q]);
    free(logits);
}

/* all_rows gives every row's logits, each equal to the sequence's own. */
static void all_rows_are_each_sequences_own(void) {
    const int V = eng->cat.cfg.vocab;
    State *a = state_create(eng->model), *b = state_create(eng->model), *alone = state_create(eng->model);
    float *batch = malloc(sizeof(float) * (size_t)V * MODEL_BATCH_ROWS), *own = malloc(sizeof(float) * (size_t)V * MODEL_BATCH_ROWS);
    int tokens[19 + 3];
    memcpy(tokens, prompts[2], sizeof(int) * 19);
    memcpy(tokens + 19, prompts[1], sizeof(int) * 3);
    State *in[2] = {a, b};
    int rows[2] = {19, 3};
    CHECK(model_forward_batch(eng->model, in, tokens, rows, 2, batch, 1) == 0);
    CHECK(model_forward(eng->model, alone, prompts[1], 3, own, 1) == 0);
    CHECK(!memcmp(batch + (size_t)19 * V, own, sizeof(float) * 3 * (size_t)V));
    state_reset(alone);
    CHECK(model_forward(eng->model, alone, prompts[2], 19, own, 1) == 0);
    CHECK(!memcmp(batch, own, sizeof(float) * 19 * (size_t)V));
    /* argument errors leave the states alone */
    State *twice[2] = {a, a};
    int one[2] = {1, 1}, bad[2] = {60, 10};
    int len = a->len;
    CHECK(model_forward_batch(eng->model, twice, tokens, one, 2, batch, 0) == -1);
    CHECK(model_forward_batch(eng->model, in, tokens, bad, 2, batch, 0) == -1);
    int wrong[2] = {tokens[0], eng->cat.cfg.vocab};
    CHECK(model_forward_batch(eng->model, in, wrong, one, 2, batch, 0) == -1);
    CHECK(a->len == len);
    state_destroy(a), state_destroy(b), state_destroy(alone);
    free(batch), free(own);
}

int main(void) {
    if (!(eng = fixture_open(dir, 11))) return 1;
    RUN(batched_matches_alone);
    RUN(all_rows_are_each_sequences_own);
    engine_close(eng);
    /* the expanded MLA cache and one thread take other paths through the kernels and attention */
    EngineOptions o = fixture_options();
    o.mla_cache = MLA_CACHE_EXPANDED;
    o.threads = 1;
    if (!(eng = engine_open(dir, &o))) return fprintf(stderr, "%s\n", df_errmsg()), 1;
    RUN(batched_matches_alone);
    RUN(all_rows_are_each_sequences_own);
    fixture_close(eng, dir);
    return check_summary();
}

/* The sampler: greedy is the argmax; sampled choices equal a brute-force reference (sort every
 * token, cut, renormalise, draw) for many logit rows and parameter sets; a seed reproduces its
 * choices and another seed does not; the frequencies of many draws follow the truncated
 * distribution; penalties, logit_bias and masks act as OpenAI defines them; log-probabilities
 * equal a double-precision log-softmax. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/sampler.h"
#include "util/rng.h"

#define V 300

static void random_logits(Rng *r, float *z, int n, float scale) {
    for (int i = 0; i < n; i++) z[i] = rng_sym(r) * scale;
}

static const float *ref_z;

static int ref_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (ref_z[x] != ref_z[y]) return ref_z[x] > ref_z[y] ? -1 : 1;
    return x - y;
}

/* The definition in sampler.h, done the slow way: full sort, cut by top_k, top_p, min_p. */
static int reference_pick(const SampleParams *p, const float *logits, const int *counts, uint64_t pos) {
    float z[V];
    for (int t = 0; t < V; t++) {
        z[t] = logits[t];
        if (counts && counts[t]) z[t] -= (float)((double)counts[t] * p->frequency_penalty + p->presence_penalty);
    }
    int ids[V];
    for (int t = 0; t < V; t++) ids[t] = t;
    ref_z = z;
    qsort(ids, V, sizeof *ids, ref_cmp);
    if (p->temperature == 0) return ids[0];
    double prob[V] = {0};
    int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    for (int i = 0; i < n; i++) prob[ids[i]] = exp(((double)z[ids[i]] - z[ids[0]]) / p->temperature);
    double total = 0;
    for (int t = 0; t < V; t++) total += prob[t];
    if (p->top_p < 1) {
        double cum = 0;
        int keep = 0;
        while (keep < n && cum < p->top_p * total) cum += prob[ids[keep++]];
        for (int i = keep; i < n; i++) prob[ids[i]] = 0;
    }
    for (int t = 0; t < V; t++)
        if (prob[t] < p->min_p) prob[t] = 0;
    double sum = 0;
    for (int t = 0; t < V; t++) sum += prob[t];
    double target = sampler_uniform(p->seed, pos) * sum, cum = 0;
    for (int t = 0; t < V; t++)
        if (prob[t] > 0 && (cum += prob[t]) > target) return t;
    return -1;
}

static void greedy_is_the_argmax_lowest_id_on_ties(void) {
    Sampler s;
    SampleParams p = SAMPLE_PARAMS_GREEDY;
    CHECK(sampler_init(&s, &p, V) == 0);
    float z[V];
    Rng r;
    rng_seed(&r, 1);
    random_logits(&r, z, V, 5);
    z[17] = 9, z[203] = 9;
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 17);
    uint64_t allow[(V + 63) / 64] = {0};
    allow[203 / 64] |= 1ull << (203 % 64);
    allow[5 / 64] |= 1ull << 5;
    CHECK(sampler_pick(&s, z, allow, 0, NULL) == 203); /* the mask removes 17 */
    memset(allow, 0, sizeof allow);
    CHECK(sampler_pick(&s, z, allow, 0, NULL) == -1);  /* nothing permitted is an error */
    sampler_free(&s);
}

static void sampled_choices_equal_the_reference(void) {
    const SampleParams sets[] = {
        {1.0, 1, 0, 0, 0, 0, 11, 0, 0, NULL, 0, 0, 0},    {0.7, 0.9, 0, 0, 0, 0, 12, 0, 0, NULL, 0, 0, 0},
        {1.3, 1, 40, 0, 0, 0, 13, 0, 0, NULL, 0, 0, 0},   {0.8, 0.5, 20, 0.05, 0, 0, 14, 0, 0, NULL, 0, 0, 0},
        {2.0, 0.95, 0, 0.1, 0, 0, 15, 0, 0, NULL, 0, 0, 0}, {0.5, 1, 1, 0, 0, 0, 16, 0, 0, NULL, 0, 0, 0},
        {1.0, 0.3, 0, 0, 0.5, 0.7, 17, 0, 0, NULL, 0, 0, 0}, {0.9, 1, 299, 0.01, 0, -0.4, 18, 0, 0, NULL, 0, 0, 0},
    };
    Rng r;
    rng_seed(&r, 2);
    int mismatches = 0, distinct_total = 0;
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        Sampler s;
        CHECK(sampler_init(&s, &sets[k], V) == 0);
        int counts[V] = {0}, seen[V] = {0}, distinct = 0;
        for (uint64_t pos = 0; pos < 400; pos++) {
            float z[V];
            random_logits(&r, z, V, pos % 2 ? 3.0f : 12.0f);
            if (pos % 7 == 0) z[pos % V] = z[(pos + 1) % V]; /* ties */
            int got = sampler_pick(&s, z, NULL, pos, NULL);
            int want = reference_pick(&sets[k], z, counts, pos);
            if (got != want) mismatches++;
            sampler_accept(&s, got);
            if (got >= 0) counts[got]++, distinct += !seen[got]++;
        }
        distinct_total += distinct;
        if (sets[k].top_k == 1) CHECK(distinct > 1); /* top_k 1 is greedy, but logits vary */
        sampler_free(&s);
    }
    CHECK_MSG(mismatches == 0, "%d choices differ from the reference", mismatches);
    CHECK(distinct_total > 200); /* the draws really vary */
}

static void a_seed_reproduces_its_choices(void) {
    SampleParams a = {0.8, 0.95, 0, 0, 0, 0, 42, 0, 0, NULL, 0, 0, 0}, b = a;
    b.seed = 43;
    Sampler sa, sa2, sb;
    CHECK(sampler_init(&sa, &a, V) == 0 && sampler_init(&sa2, &a, V) == 0 && sampler_init(&sb, &b, V) == 0);
    Rng r;
    rng_seed(&r, 3);
    int same = 0, differ = 0;
    for (uint64_t pos = 0; pos < 100; pos++) {
        float z[V];
        random_logits(&r, z, V, 2);
        int x = sampler_pick(&sa, z, NULL, pos, NULL), y = sampler_pick(&sa2, z, NULL, pos, NULL);
        same += x == y;
        differ += x != sampler_pick(&sb, z, NULL, pos, NULL);
    }
    CHECK(same == 100);
    CHECK(differ > 50);
    /* the draw depends on (seed, position) only */
    CHECK(sampler_uniform(42, 7) == sampler_uniform(42, 7));
    CHECK(sampler_uniform(42, 7) != sampler_uniform(42, 8));
    CHECK(sampler_uniform(42, 7) != sampler_uniform(43, 7));
    sampler_free(&sa), sampler_free(&sa2), sampler_free(&sb);
}

/* Over many positions with the same logits, each kept token is drawn about as often as its
 * truncated probability says, and nothing outside the cut is ever drawn. */
static void frequencies_follow_the_truncated_distribution(void) {
    float z[V];
    for (int t = 0; t < V; t++) z[t] = -10;
    const float top[6] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f};
    for (int i = 0; i < 6; i++) z[10 * i + 3] = top[i];
    SampleParams p = {1.0, 0.8, 5, 0, 0, 0, 99, 0, 0, NULL, 0, 0, 0};
    /* top_k 5 keeps the five best (weights 1, .61, .37, .22, .14 of 2.33); top_p 0.8 of that
     * mass (1.87) is reached by the first three */
    double w[3], total = 0;
    for (int i = 0; i < 3; i++) total += (w[i] = exp(top[i] - top[0]));
    Sampler s;
    CHECK(sampler_init(&s, &p, V) == 0);
    int hits[V] = {0};
    const int N = 40000;
    for (int pos = 0; pos < N; pos++) {
        int t = sampler_pick(&s, z, NULL, (uint64_t)pos, NULL);
        if (t >= 0) hits[t]++;
    }
    for (int i = 0; i < 3; i++) {
        double want = w[i] / total, got = (double)hits[10 * i + 3] / N;
        CHECK_MSG(fabs(got - want) < 4 * sqrt(want * (1 - want) / N) + 1e-3, "token %d: %.4f vs %.4f", 10 * i + 3, got, want);
    }
    CHECK(hits[33] == 0 && hits[43] == 0 && hits[53] == 0 && hits[0] == 0);
    sampler_free(&s);
}

static void penalties_and_bias_follow_openai(void) {
    float z[V] = {0};
    z[1] = 1.0f, z[2] = 0.9f, z[3] = 0.5f;
    SampleParams p = SAMPLE_PARAMS_GREEDY;
    p.presence_penalty = 0.2;
    Sampler s;
    CHECK(sampler_init(&s, &p, V) == 0);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 1);
    sampler_accept(&s, 1);
    CHECK(sampler_pick(&s, z, NULL, 1, NULL) == 2); /* 1.0 - 0.2 < 0.9 */
    sampler_accept(&s, 2);
    sampler_accept(&s, 2);
    CHECK(sampler_pick(&s, z, NULL, 2, NULL) == 1); /* presence counts once: 0.8 > 0.7 */
    sampler_restart(&s);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 1);
    sampler_free(&s);
    p.presence_penalty = 0, p.frequency_penalty = 0.3;
    CHECK(sampler_init(&s, &p, V) == 0);
    sampler_accept(&s, 1);
    CHECK(sampler_pick(&s, z, NULL, 1, NULL) == 2); /* 0.7 < 0.9 */
    sampler_accept(&s, 2), sampler_accept(&s, 2);
    CHECK(sampler_pick(&s, z, NULL, 3, NULL) == 1); /* 0.7 > 0.9 - 0.6 */
    sampler_free(&s);
    LogitBias bias[2] = {{3, 0.6f}, {1, -100}};
    p = (SampleParams)SAMPLE_PARAMS_GREEDY;
    p.bias = bias, p.n_bias = 2;
    CHECK(sampler_init(&s, &p, V) == 0);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 3); /* 0.5 + 0.6 > 0.9 */
    sampler_free(&s);
    LogitBias bad = {V, 1};
    p.bias = &bad, p.n_bias = 1;
    CHECK(sampler_init(&s, &p, V) == -1);
}

static void logprobs_are_a_log_softmax(void) {
    Rng r;
    rng_seed(&r, 5);
    float z[V];
    random_logits(&r, z, V, 6);
    z[7] = z[8] = 7;
    SampleParams p = SAMPLE_PARAMS_GREEDY;
    p.logprobs = 1, p.top_logprobs = 5;
    Sampler s;
    CHECK(sampler_init(&s, &p, V) == 0);
    SampleInfo info;
    int t = sampler_pick(&s, z, NULL, 0, &info);
    CHECK(t == 7);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)z[i] - 7.0);
    CHECK_NEAR(info.logprob, -log(sum), 1e-6);
    CHECK(info.n_top == 5 && info.top[0].token == 7 && info.top[1].token == 8);
    for (int i = 1; i < info.n_top; i++) CHECK(info.top[i].logprob <= info.top[i - 1].logprob);
    for (int i = 0; i < info.n_top; i++) CHECK_NEAR(info.top[i].logprob, z[info.top[i].token] - 7.0 - log(sum), 1e-5);
    sampler_free(&s);
}

/* llama.cpp's repetition penalty: a token among the last repeat_last_n of the context (prompt
 * included) has its logit divided by the penalty when positive, multiplied when not; the window
 * moves on as tokens are emitted. Checked against the processed logits written out by hand. */
static void repeat_penalty_follows_llama_cpp(void) {
    float z[V] = {0};
    for (int t = 0; t < V; t++) z[t] = -3.0f;
    z[5] = 2.0f, z[6] = 1.7f, z[7] = -1.0f, z[8] = -1.4f;
    SampleParams p = SAMPLE_PARAMS_GREEDY;
    p.repeat_penalty = 1.25, p.repeat_last_n = 3;
    Sampler s;
    CHECK(sampler_init(&s, &p, V) == 0);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 5); /* an empty window: the argmax */
    int32_t prompt[] = {5, 9, 9, 5, 7};              /* the last 3: 9 5 7 */
    sampler_context(&s, prompt, 5);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 6); /* 2.0 / 1.25 = 1.6 < 1.7 */
    SampleInfo info;
    p.logprobs = 1;
    Sampler l;
    CHECK(sampler_init(&l, &p, V) == 0);
    sampler_context(&l, prompt, 5);
    sampler_pick(&l, z, NULL, 0, &info);
    CHECK_NEAR(l.z[5], 1.6, 1e-6);                  /* divided */
    CHECK_NEAR(l.z[7], -1.25, 1e-6);                /* multiplied */
    CHECK_NEAR(l.z[8], -1.4, 1e-6);                 /* outside the window */
    CHECK_NEAR(l.z[9], -3.75, 1e-6);                /* in the window (once or twice: the same) */
    CHECK_NEAR(l.z[10], -3.0, 1e-6);
    sampler_free(&l);
    sampler_accept(&s, 6);                           /* window 5 7 6 */
    CHECK(sampler_pick(&s, z, NULL, 1, NULL) == 5);  /* 1.6 > 1.7 / 1.25 = 1.36 */
    sampler_accept(&s, 8), sampler_accept(&s, 8);    /* window 6 8 8: 5 is back to 2.0 */
    CHECK(sampler_pick(&s, z, NULL, 2, NULL) == 5);
    sampler_context(&s, prompt, 2);                  /* a new context: 5 9 */
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 6);
    sampler_free(&s);
    p.logprobs = 0, p.repeat_last_n = -1;              /* every token so far */
    CHECK(sampler_init(&s, &p, V) == 0);
    sampler_context(&s, prompt, 1);
    for (int i = 0; i < 100; i++) sampler_accept(&s, 9);
    CHECK(sampler_pick(&s, z, NULL, 0, NULL) == 6);
    CHECK(s.counts != NULL);                         /* sessions draft nothing after penalised choices */
    sampler_free(&s);
    p.repeat_penalty = 1; /* 1 (or 0) is off: plain greedy */
    CHECK(sampler_init(&s, &p, V) == 0 && s.plain);
    sampler_free(&s);
}

static void bad_parameters_are_refused(void) {
    Sampler s;
    SampleParams bad[] = {{2.5, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0},
                          {1, 1, -1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0}, {1, 1, 0, 1.5, 0, 0, 0, 0, 0, NULL, 0, 0, 0},
                          {1, 1, 0, 0, 3, 0, 0, 0, 0, NULL, 0, 0, 0},  {1, 1, 0, 0, 0, 0, 0, 1, 21, NULL, 0, 0, 0},
                          {NAN, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0},  {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, -1, 64},
                          {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 11, 64}, {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 1.1, -2},
                          {0, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, NAN, 64}};
    static const char *const field[] = {"temperature", "top_p", "top_k", "min_p", "presence_penalty", "top_logprobs", "temperature",
                                        "repeat_penalty", "repeat_penalty", "repeat_last_n", "repeat_penalty"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(sampler_init(&s, &bad[i], V) == -1, "set %zu", i);
        const char *f = NULL;
        CHECK_MSG(sampler_check(&bad[i], &f) == -1 && f && !strcmp(f, field[i]), "set %zu: %s", i, f ? f : "none");
    }
}

/* min_p 1 is the edge of its range, not past it: only the most probable tokens are kept, so
 * every draw is the argmax. */
static void min_p_one_keeps_the_most_probable(void) {
    float z[V];
    for (int i = 0; i < V; i++) z[i] = (float)((i * 7) % 11) * 0.1f;
    z[5] = 3.0f;
    SampleParams p = {1, 1, 0, 1, 0, 0, 0, 0, 0, NULL, 0, 0, 0};
    const char *f;
    CHECK(sampler_check(&p, &f) == 0);
    Sampler s;
    CHECK(sampler_init(&s, &p, V) == 0);
    for (uint64_t pos = 0; pos < 50; pos++) CHECK(sampler_pick(&s, z, NULL, pos, NULL) == 5);
    sampler_free(&s);
}

int main(void) {
    RUN(greedy_is_the_argmax_lowest_id_on_ties);
    RUN(min_p_one_keeps_the_most_probable);
    RUN(sampled_choices_equal_the_reference);
    RUN(a_seed_reproduces_its_choices);
    RUN(frequencies_follow_the_truncated_distribution);
    RUN(penalties_and_bias_follow_openai);
    RUN(logprobs_are_a_log_softmax);
    RUN(repeat_penalty_follows_llama_cpp);
    RUN(bad_parameters_are_refused);
    return check_summary();
}

/* sampler.c - greedy and reproducible sampled token choice (see sampler.h for the order). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/platform.h"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sampler_uniform(uint64_t seed, uint64_t position) {
    uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ull);
    uint64_t h = mix64(key ^ mix64((position + 1) * 0xd1b54a32d192ed03ull));
    return (double)(h >> 11) * 0x1.0p-53;
}

static int bad(const char **field, const char *name, const char *fmt, double v) {
    *field = name;
    return df_fail(fmt, v);
}

int sampler_check(const SampleParams *p, const char **field) {
    if (!(p->temperature >= 0 && p->temperature <= 2)) return bad(field, "temperature", "%g is outside 0..2", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1)) return bad(field, "top_p", "%g is outside (0, 1]", p->top_p);
    if (p->top_k < 0) return bad(field, "top_k", "%g is negative", p->top_k);
    if (!(p->min_p >= 0 && p->min_p <= 1)) return bad(field, "min_p", "%g is outside 0..1", p->min_p);
    if (!(fabs(p->presence_penalty) <= 2)) return bad(field, "presence_penalty", "%g is outside -2..2", p->presence_penalty);
    if (!(fabs(p->frequency_penalty) <= 2)) return bad(field, "frequency_penalty", "%g is outside -2..2", p->frequency_penalty);
    if (!(p->repeat_penalty >= 0 && p->repeat_penalty <= SAMPLE_MAX_REPEAT_PENALTY))
        return bad(field, "repeat_penalty", "%g is outside 0..10", p->repeat_penalty);
    if (p->repeat_last_n < -1 || p->repeat_last_n > SAMPLE_MAX_REPEAT_LAST_N)
        return bad(field, "repeat_last_n", "%g is outside -1..1048576", p->repeat_last_n);
    if (p->top_logprobs < 0 || p->top_logprobs > SAMPLE_MAX_TOP_LOGPROBS)
        return bad(field, "top_logprobs", "%g is outside 0..20", p->top_logprobs);
    if (p->n_bias < 0 || p->n_bias > SAMPLE_MAX_BIAS) return bad(field, "logit_bias", "%g entries are more than the 300 allowed", p->n_bias);
    for (int i = 0; i < p->n_bias; i++)
        if (!(fabsf(p->bias[i].bias) <= 100)) return bad(field, "logit_bias", "%g is outside -100..100", p->bias[i].bias);
    return 0;
}

static int check_params(const SampleParams *p, int vocab) {
    const char *field;
    if (sampler_check(p, &field)) return df_fail("%s: %s", field, df_errmsg());
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token < 0 || p->bias[i].token >= vocab)
            return df_fail("logit_bias: token id %d is outside 0..%d", p->bias[i].token, vocab - 1);
    return 0;
}

int sampler_repeats(const SampleParams *p) {
    return p->repeat_penalty != 0 && p->repeat_penalty != 1 && p->repeat_last_n != 0;
}

int sampler_init(Sampler *s, const SampleParams *p, int vocab) {
    memset(s, 0, sizeof *s);
    if (vocab < 1) return df_fail("sampler: empty vocabulary");
    if (check_params(p, vocab)) return -1;
    s->p = *p;
    s->vocab = vocab;
    int repeat = sampler_repeats(p), penalised = p->presence_penalty != 0 || p->frequency_penalty != 0 || repeat;
    s->plain = p->temperature == 0 && !penalised && p->n_bias == 0 && !p->logprobs;
    if (penalised) s->counts = df_calloc((size_t)vocab, sizeof *s->counts);
    if (repeat) s->in_window = df_calloc((size_t)vocab, sizeof *s->in_window);
    if (repeat && p->repeat_last_n > 0) s->window = df_malloc(sizeof *s->window * (size_t)p->repeat_last_n);
    s->z = df_malloc(sizeof *s->z * (size_t)vocab);
    s->prob = df_malloc(sizeof *s->prob * (size_t)vocab);
    s->order = df_malloc(sizeof *s->order * (size_t)vocab);
    return 0;
}

void sampler_free(Sampler *s) {
    free(s->counts), free(s->z), free(s->prob), free(s->order), free(s->in_window), free(s->window);
    memset(s, 0, sizeof *s);
}

void sampler_restart(Sampler *s) {
    if (s->counts) memset(s->counts, 0, sizeof *s->counts * (size_t)s->vocab);
}

/* One more token in the repetition window (the oldest leaves a full ring). */
static void window_push(Sampler *s, int32_t token) {
    if (!s->in_window || token < 0 || token >= s->vocab) return;
    if (s->window) {
        size_t cap = (size_t)s->p.repeat_last_n;
        if (s->window_n == cap) s->in_window[s->window[s->window_at]]--;
        else s->window_n++;
        s->window[s->window_at] = token;
        s->window_at = (s->window_at + 1) % cap;
    }
    if (s->in_window[token] < UINT32_MAX) s->in_window[token]++;
}

void sampler_context(Sampler *s, const int32_t *ids, size_t n) {
    if (!s->in_window) return;
    memset(s->in_window, 0, sizeof *s->in_window * (size_t)s->vocab);
    s->window_at = s->window_n = 0;
    size_t from = s->window && n > (size_t)s->p.repeat_last_n ? n - (size_t)s->p.repeat_last_n : 0;
    for (size_t i = from; i < n; i++) window_push(s, ids[i]);
}

void sampler_accept(Sampler *s, int token) {
    if (s->counts && token >= 0 && token < s->vocab && s->counts[token] < UINT32_MAX) s->counts[token]++;
    window_push(s, token);
}

static int permitted(const uint64_t *allow, int t) { return !allow || (allow[t >> 6] >> (t & 63)) & 1u; }

/* a comes before b: larger z, then lower id. */
static int before(const float *z, int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); }

/* Step 1 into s->z; returns the best token (-1: none permitted). */
static int process(Sampler *s, const float *logits, const uint64_t *allow) {
    const SampleParams *p = &s->p;
    float *z = s->z;
    memcpy(z, logits, sizeof *z * (size_t)s->vocab);
    for (int i = 0; i < p->n_bias; i++) z[p->bias[i].token] += p->bias[i].bias;
    if (s->in_window) /* llama.cpp: positive logits divided, the others multiplied */
        for (int t = 0; t < s->vocab; t++)
            if (s->in_window[t]) z[t] = z[t] <= 0 ? (float)(z[t] * p->repeat_penalty) : (float)(z[t] / p->repeat_penalty);
    if (s->counts)
        for (int t = 0; t < s->vocab; t++)
            if (s->counts[t])
                z[t] -= (float)((double)s->counts[t] * p->frequency_penalty + p->presence_penalty);
    int best = -1;
    for (int t = 0; t < s->vocab; t++) {
        if (!permitted(allow, t)) z[t] = -INFINITY;
        else if (!isfinite(z[t])) return df_fail("sampler: logit of token %d is not finite", t), -2;
        else if (best < 0 || z[t] > z[best]) best = t;
    }
    return best;
}

/* The chosen token's log-probability and the top alternatives, from softmax(z). */
static void report(const Sampler *s, int best, int chosen, SampleInfo *info) {
    const float *z = s->z;
    double sum = 0;
    for (int t = 0; t < s->vocab; t++)
        if (z[t] != -INFINITY) sum += exp((double)z[t] - z[best]);
    double lse = z[best] + log(sum);
    info->logprob = (float)(z[chosen] - lse);
    int n = 0, want = s->p.top_logprobs;
    for (int t = 0; t < s->vocab && want; t++) {
        if (z[t] == -INFINITY || (n == want && !before(z, t, info->top[n - 1].token))) continue;
        int at = n < want ? n++ : want - 1;
        while (at > 0 && before(z, t, info->top[at - 1].token)) info->top[at] = info->top[at - 1], at--;
        info->top[at].token = t;
    }
    for (int i = 0; i < n; i++) info->top[i].logprob = (float)(z[info->top[i].token] - lse);
    info->n_top = n;
}

static void swap_ids(int *a, int *b) {
    int t = *a;
    *a = *b, *b = t;
}

/* Reorders ids[0..n) so that its first k are the k that come first (before()); k < n. */
static void select_first(const float *z, int *ids, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2; /* median of three as the pivot, moved to hi */
        if (before(z, ids[mid], ids[lo])) swap_ids(&ids[mid], &ids[lo]);
        if (before(z, ids[hi], ids[lo])) swap_ids(&ids[hi], &ids[lo]);
        if (before(z, ids[mid], ids[hi])) swap_ids(&ids[mid], &ids[hi]);
        int pivot = ids[hi], store = lo;
        for (int i = lo; i < hi; i++)
            if (before(z, ids[i], pivot)) swap_ids(&ids[i], &ids[store++]);
        swap_ids(&ids[store], &ids[hi]);
        if (store == k) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

static int by_z(const void *a, const void *b, void *z) {
    int x = *(const int *)a, y = *(const int *)b;
    return before(z, x, y) ? -1 : before(z, y, x) ? 1 : 0;
}

/* top_p over the kept ids[0..n) (prob > 0 for them): zeroes prob outside the nucleus. Only ids
 * with prob >= (1 - top_p) * total / n can be in it (the rest hold at most 1 - top_p of the
 * mass and all come after them), so only those are sorted. */
static void nucleus(Sampler *s, int *ids, int n) {
    double total = 0; /* in id order, as every sum over the vocabulary here */
    for (int t = 0; t < s->vocab; t++) total += s->prob[t];
    double floor_p = (1 - s->p.top_p) * total / n;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (s->prob[ids[i]] >= floor_p) ids[m++] = ids[i];
        else s->prob[ids[i]] = 0;
    }
    plat_qsort_r(ids, (size_t)m, sizeof *ids, by_z, s->z);
    double cum = 0, need = s->p.top_p * total;
    int keep = 0;
    while (keep < m && cum < need) cum += s->prob[ids[keep++]];
    for (int i = keep; i < m; i++) s->prob[ids[i]] = 0;
}

/* Steps 2-4 with temperature > 0. best: the most probable token. */
static int draw(Sampler *s, int best, uint64_t position) {
    const SampleParams *p = &s->p;
    const double inv_t = 1.0 / p->temperature, top = s->z[best];
    int n = 0;
    for (int t = 0; t < s->vocab; t++) {
        s->prob[t] = s->z[t] == -INFINITY ? 0 : exp(((double)s->z[t] - top) * inv_t);
        if (s->prob[t] > 0) s->order[n++] = t;
    }
    if (p->top_k > 0 && p->top_k < n) {
        select_first(s->z, s->order, n, p->top_k);
        for (int i = p->top_k; i < n; i++) s->prob[s->order[i]] = 0;
        n = p->top_k;
    }
    if (p->top_p < 1) nucleus(s, s->order, n);
    if (p->min_p > 0) /* the most probable token has prob 1 and is always kept */
        for (int t = 0; t < s->vocab; t++)
            if (s->prob[t] < p->min_p) s->prob[t] = 0;
    double total = 0;
    for (int t = 0; t < s->vocab; t++) total += s->prob[t];
    double target = sampler_uniform(p->seed, position) * total, cum = 0;
    int last = best;
    for (int t = 0; t < s->vocab; t++) {
        if (s->prob[t] == 0) continue;
        cum += s->prob[t];
        last = t;
        if (cum > target) return t;
    }
    return last; /* rounding left target at the very end */
}

int sampler_pick(Sampler *s, const float *logits, const uint64_t *allow, uint64_t position, SampleInfo *info) {
    if (s->plain && !allow) {
        int best = 0;
        for (int t = 1; t < s->vocab; t++)
            if (logits[t] > logits[best]) best = t;
        if (!isfinite(logits[best])) return df_fail("sampler: the logits are not finite");
        if (info) info->logprob = 0, info->n_top = 0;
        return best;
    }
    int best = process(s, logits, allow);
    if (best == -2) return -1;
    if (best < 0) return df_fail("sampler: the output constraint permits no token here");
    int chosen = s->p.temperature == 0 ? best : draw(s, best, position);
    if (info) {
        memset(info, 0, sizeof *info);
        if (s->p.logprobs) report(s, best, chosen, info);
    }
    return chosen;
}

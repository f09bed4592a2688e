/* bench_constrain - what constrained decoding costs per generated token: the time of
 * matcher_mask along random-weight-like walks (argmax of random logits among the allowed tokens)
 * on a small and a K3-sized synthetic vocabulary, against checking every token on its own
 * (matcher_allows for each id, the naive way) at the same states.
 *
 *   build/bench/bench_constrain [--steps N] [--runs N]
 *
 * Each walk has a budget of --steps tokens (200; it must exceed a grammar's minimum reply).
 * Prints, per vocabulary and grammar: the trie's size and build time, the median, 90th
 * percentile and worst mask time over all steps of all runs, the first mask of a run, the share
 * of masks over 5 ms (walks of the whole trie for a string or free text not yet cached), the
 * share that built a cache entry (most are walks pruned after a few nodes), and the median
 * naive time with its ratio to the mask at the same steps. Random weights, a
 * synthetic vocabulary and a shared machine: read the ratios, not the absolute numbers. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cli/die.h"
#include "constrain_fixture.h"
#include "text/reply_grammar.h"

static const char *const answer_schema =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},\"year\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},\"maxItems\":4},"
    "\"rating\":{\"type\":[\"number\",\"null\"]},\"kind\":{\"enum\":[\"book\",\"film\",\"game\"]}},"
    "\"required\":[\"title\",\"year\",\"tags\",\"rating\",\"kind\"],\"additionalProperties\":false}";

static const char *const tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]},\"days\":{\"type\":\"integer\"}},"
    "\"required\":[\"city\",\"unit\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},\"filters\":{\"type\":\"object\","
    "\"additionalProperties\":{\"type\":\"string\"}}},\"required\":[\"query\"]}}}]";

typedef struct {
    double *v;
    size_t n, cap;
} Samples;

static void add(Samples *s, double x) {
    if (s->n == s->cap) s->cap = s->cap ? 2 * s->cap : 256, s->v = realloc(s->v, s->cap * sizeof *s->v);
    s->v[s->n++] = x;
}

static double pct(Samples *s, double p) {
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, bench_cmp_double);
    size_t i = (size_t)(p * (double)(s->n - 1));
    return s->v[i];
}

static void run_grammar(const char *label, const Grammar *g, const VocabTrie *t, int steps, int runs) {
    Samples mask = {0}, cold = {0}, naive = {0}, at_naive = {0};
    int n_ids = t->n_ids;
    uint64_t masks = 0, walks = 0, slow = 0;
    for (int run = 0; run < runs; run++) {
        Rng rng;
        rng_seed(&rng, (uint64_t)run + 1);
        Matcher *m = matcher_new(g, t);
        uint64_t *bits = malloc(matcher_mask_words(m) * sizeof *bits);
        int64_t budget = steps;
        for (int k = 0; k < steps && !matcher_done(m); k++) {
            double t0 = df_now();
            int n = matcher_mask(m, budget - k, bits);
            double dt = df_now() - t0;
            if (n <= 0) {
                if (k == 0) fprintf(stderr, "%s: a budget of %d tokens is below the grammar's minimum\n", label, steps);
                break;
            }
            add(k ? &mask : &cold, dt);
            slow += dt > 5e-3;
            if (k % 16 == 5) { /* the naive way at the same state */
                double t1 = df_now();
                int agree = 1;
                for (int32_t id = 0; id < n_ids; id++) agree &= matcher_allows(m, id, budget - k) == mask_has(bits, id);
                add(&naive, df_now() - t1);
                add(&at_naive, dt);
                if (!agree) fprintf(stderr, "%s: naive and trie masks differ at step %d\n", label, k);
            }
            int32_t id = fixture_pick(bits, n_ids, n, &rng, PICK_RANDOM_LOGITS);
            if (matcher_accept(m, id)) break;
        }
        MatcherStats st = matcher_stats(m);
        masks += st.masks, walks += st.cache_walks + st.tight_walks;
        free(bits);
        matcher_free(m);
    }
    double med_naive = pct(&naive, 0.5), med_at = pct(&at_naive, 0.5);
    printf("  %-30s %4llu masks: median %6.1f us  p90 %6.1f us  max %7.1f us  first %7.1f us  over 5 ms %2.0f%%  "
           "cache builds %2.0f%% | naive %8.1f us (%.0fx the mask at the same steps)\n",
           label, (unsigned long long)masks, 1e6 * pct(&mask, 0.5), 1e6 * pct(&mask, 0.9), 1e6 * pct(&mask, 1.0),
           1e6 * pct(&cold, 0.5), masks ? 100.0 * (double)slow / (double)masks : 0,
           masks ? 100.0 * (double)walks / (double)masks : 0, 1e6 * med_naive, med_at > 0 ? med_naive / med_at : 0);
    free(mask.v), free(cold.v), free(naive.v), free(at_naive.v);
}

static Grammar *reply(const VocabTrie *t, const char *rf_text, const char *tc_text, int thinking) {
    json_t *rf = rf_text ? json_loads(rf_text, 0, NULL) : NULL, *tl = json_loads(tools, 0, NULL);
    json_t *tc = tc_text ? json_loads(tc_text, JSON_DECODE_ANY, NULL) : NULL;
    ReplySpec spec = {t, rf, tl, tc, 1, thinking};
    Grammar *g = NULL;
    if (reply_grammar(&spec, &g)) df_die("%s", df_errmsg());
    json_decref(rf), json_decref(tl), json_decref(tc);
    return g;
}

int main(int argc, char **argv) {
    int steps = 200, runs = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
    }
    int sizes[] = {2000, 163584};
    char rf[2048];
    snprintf(rf, sizeof rf, "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"item\",\"strict\":true,\"schema\":%s}}",
             answer_schema);
    for (int v = 0; v < 2; v++) {
        Tokenizer *tok = fixture_synth(sizes[v], NULL);
        double t0 = df_now();
        VocabTrie *t = fixture_trie(tok);
        printf("vocabulary %d tokens: trie %u nodes (longest token %u bytes), built in %.1f ms\n", tok_vocab_size(tok),
               t->n_nodes, t->max_len, 1e3 * (df_now() - t0));
        Grammar *gs[3] = {reply(t, rf, "\"none\"", 0), reply(t, NULL, "\"required\"", 1), reply(t, "{\"type\":\"json_object\"}", NULL, 0)};
        const char *labels[3] = {"json_schema answer", "thinking + required tool call", "json_object answer"};
        for (int k = 0; k < 3; k++) {
            run_grammar(labels[k], gs[k], t, steps, runs);
            grammar_free(gs[k]);
        }
        vocab_trie_free(t);
        tok_free(tok);
    }
    fixture_cleanup();
    return 0;
}

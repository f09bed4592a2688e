#include "text/bpe_train.h"

#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "util/err.h"

/* A distinct piece of the documents: its current symbols (token ids) and how often it occurs. */
typedef struct {
    int32_t *sym;
    int len;
    int64_t freq;
    uint32_t stamp; /* the merge that last rewrote it, to visit each word once per merge */
} Word;

/* An adjacent pair (a << 32 | b), its weighted count and the words it may occur in (a word is
 * listed again each time the pair is re-added to it; stale entries are skipped). */
typedef struct {
    uint64_t key;
    int64_t count;
    int32_t *words;
    uint32_t nw, capw;
} Pair;

#define EMPTY UINT64_MAX

typedef struct {
    int64_t count;
    uint64_t key;
} HeapEntry;

typedef struct {
    Word *w;
    int n_words;
    Pair *tab;
    size_t mask, used;
    HeapEntry *heap;
    size_t hn, hcap;
} Trainer;

/* --- pair table (open addressing on the 64-bit key) --- */

static size_t slot_of(uint64_t key, size_t mask) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ h >> 31) & mask;
}

static Pair *pair_find(Trainer *t, uint64_t key, int create);

static void table_grow(Trainer *t) {
    Pair *old = t->tab;
    size_t old_n = t->mask + 1;
    t->mask = old_n * 2 - 1;
    t->tab = df_malloc((t->mask + 1) * sizeof *t->tab);
    for (size_t i = 0; i <= t->mask; i++) t->tab[i] = (Pair){.key = EMPTY};
    t->used = 0;
    for (size_t i = 0; i < old_n; i++)
        if (old[i].key != EMPTY) *pair_find(t, old[i].key, 1) = old[i];
    free(old);
}

static Pair *pair_find(Trainer *t, uint64_t key, int create) {
    for (size_t i = slot_of(key, t->mask);; i = (i + 1) & t->mask) {
        if (t->tab[i].key == key) return &t->tab[i];
        if (t->tab[i].key != EMPTY) continue;
        if (!create) return NULL;
        if ((t->used + 1) * 2 > t->mask + 1) {
            table_grow(t);
            return pair_find(t, key, 1);
        }
        t->used++;
        t->tab[i] = (Pair){.key = key};
        return &t->tab[i];
    }
}

/* --- max-heap: higher count first, then the lower key (older ids) --- */

static int above(HeapEntry x, HeapEntry y) { return x.count != y.count ? x.count > y.count : x.key < y.key; }

static void heap_push(Trainer *t, HeapEntry e) {
    if (t->hn == t->hcap) {
        t->hcap = t->hcap ? t->hcap * 2 : 1024;
        t->heap = df_realloc(t->heap, t->hcap * sizeof *t->heap);
    }
    size_t i = t->hn++;
    while (i > 0 && above(e, t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
}

static HeapEntry heap_pop(Trainer *t) {
    HeapEntry top = t->heap[0], last = t->heap[--t->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->hn) break;
        if (c + 1 < t->hn && above(t->heap[c + 1], t->heap[c])) c++;
        if (!above(t->heap[c], last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (t->hn) t->heap[i] = last;
    return top;
}

/* --- counting --- */

static uint64_t key_of(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static void pair_add(Trainer *t, int32_t a, int32_t b, int64_t freq, int32_t word) {
    Pair *p = pair_find(t, key_of(a, b), 1);
    if (p->nw == p->capw) {
        p->capw = p->capw ? p->capw * 2 : 4;
        p->words = df_realloc(p->words, p->capw * sizeof *p->words);
    }
    p->words[p->nw++] = word;
    p->count += freq;
    heap_push(t, (HeapEntry){p->count, p->key});
}

static void word_pairs(Trainer *t, int32_t wi, int sign) {
    Word *w = &t->w[wi];
    for (int i = 0; i + 1 < w->len; i++) {
        if (sign > 0) pair_add(t, w->sym[i], w->sym[i + 1], w->freq, wi);
        else pair_find(t, key_of(w->sym[i], w->sym[i + 1]), 0)->count -= w->freq;
    }
}

/* Replaces every (a, b) in word wi by c, left to right; returns 0 if the word had none. */
static int rewrite(Trainer *t, int32_t wi, int32_t a, int32_t b, int32_t c) {
    Word *w = &t->w[wi];
    int found = 0;
    for (int i = 0; i + 1 < w->len && !found; i++) found = w->sym[i] == a && w->sym[i + 1] == b;
    if (!found) return 0;
    word_pairs(t, wi, -1);
    int o = 0;
    for (int i = 0; i < w->len; i++) {
        if (i + 1 < w->len && w->sym[i] == a && w->sym[i + 1] == b) w->sym[o++] = c, i++;
        else w->sym[o++] = w->sym[i];
    }
    w->len = o;
    word_pairs(t, wi, +1);
    return 1;
}

/* Merges (a, b) into a token of m (new, or existing when another split already made those
 * bytes); returns 1 when a new token was added. */
static int merge(Trainer *t, RankMap *m, uint64_t key, uint32_t stamp) {
    int32_t a = (int32_t)(key >> 32), b = (int32_t)(uint32_t)key;
    size_t la, lb;
    const uint8_t *ba = rankmap_bytes(m, (uint32_t)a, &la), *bb = rankmap_bytes(m, (uint32_t)b, &lb);
    uint8_t *cat = df_malloc(la + lb);
    memcpy(cat, ba, la), memcpy(cat + la, bb, lb);
    int32_t dup, c = rankmap_add(m, cat, la + lb, &dup);
    int added = c >= 0;
    if (!added) c = dup;
    free(cat);
    Pair *p = pair_find(t, key, 0);
    int32_t *words = p->words;
    uint32_t nw = p->nw;
    p->words = NULL, p->nw = p->capw = 0; /* detached: the table may move while words change */
    for (uint32_t i = 0; i < nw; i++) {
        Word *w = &t->w[words[i]];
        if (w->stamp == stamp) continue;
        w->stamp = stamp;
        rewrite(t, words[i], a, b, c);
    }
    free(words);
    pair_find(t, key, 0)->count = 0;
    return added;
}

/* Distinct pieces of the documents with their counts. */
static int collect_words(Trainer *t, const char *const *docs, int n_docs) {
    Pretok *pt = pretok_new();
    if (!pt) return -1;
    PretokIter it;
    if (pretok_iter_init(&it, pt)) return pretok_free(pt), -1;
    RankMap seen;
    rankmap_init(&seen);
    int cap = 0, rc = 0;
    for (int d = 0; d < n_docs && !rc; d++) {
        const uint8_t *s = (const uint8_t *)docs[d];
        pretok_iter_set(&it, s, strlen(docs[d]));
        size_t start, len;
        while ((rc = pretok_next(&it, &start, &len)) == 1) {
            int32_t dup;
            if (rankmap_add(&seen, s + start, len, &dup) < 0) {
                t->w[dup].freq++;
                continue;
            }
            if (t->n_words == cap) {
                cap = cap ? cap * 2 : 1024;
                t->w = df_realloc(t->w, (size_t)cap * sizeof *t->w);
            }
            Word *w = &t->w[t->n_words++];
            *w = (Word){.sym = df_malloc(len * sizeof *w->sym), .len = (int)len, .freq = 1};
            for (size_t i = 0; i < len; i++) w->sym[i] = s[start + i];
        }
        rc = rc < 0 ? -1 : 0;
    }
    pretok_iter_end(&it);
    pretok_free(pt);
    rankmap_free(&seen);
    return rc;
}

int bpe_train(const char *const *docs, int n_docs, int n_merges, RankMap *m) {
    Trainer t = {0};
    t.mask = 4095;
    t.tab = df_malloc((t.mask + 1) * sizeof *t.tab);
    for (size_t i = 0; i <= t.mask; i++) t.tab[i] = (Pair){.key = EMPTY};
    int learned = collect_words(&t, docs, n_docs);
    for (int wi = 0; wi < t.n_words && learned == 0; wi++) word_pairs(&t, wi, +1);
    for (uint32_t stamp = 1; learned >= 0 && learned < n_merges && t.hn > 0;) {
        HeapEntry e = heap_pop(&t);
        Pair *p = pair_find(&t, e.key, 0);
        if (p->count != e.count) { /* stale; re-queue a count that dropped */
            if (p->count > 0 && p->count < e.count) heap_push(&t, (HeapEntry){p->count, p->key});
            continue;
        }
        if (e.count <= 0) continue;
        learned += merge(&t, m, e.key, stamp++);
    }
    for (int i = 0; i < t.n_words; i++) free(t.w[i].sym);
    for (size_t i = 0; i <= t.mask; i++) free(t.tab[i].words);
    free(t.w), free(t.tab), free(t.heap);
    return learned;
}

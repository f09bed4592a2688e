#include "serve/memo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

typedef struct {
    int32_t *key, *ids;
    size_t key_n, n;
    int stop;
    uint64_t used; /* 0: empty slot */
} Entry;

struct Memo {
    pthread_mutex_t mu;
    Entry *e;
    int cap;
    uint64_t clock;
};

Memo *memo_new(int entries) {
    Memo *m = df_calloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->cap = entries;
    m->e = entries ? df_calloc((size_t)entries, sizeof *m->e) : NULL;
    return m;
}

static void entry_clear(Entry *e) {
    free(e->key);
    free(e->ids);
    memset(e, 0, sizeof *e);
}

void memo_free(Memo *m) {
    if (!m) return;
    for (int i = 0; i < m->cap; i++) entry_clear(&m->e[i]);
    free(m->e);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static Entry *find(Memo *m, const int32_t *key, size_t key_n) {
    for (int i = 0; i < m->cap; i++) {
        Entry *e = &m->e[i];
        if (e->used && e->key_n == key_n && !memcmp(e->key, key, key_n * sizeof *key)) return e;
    }
    return NULL;
}

int memo_get(Memo *m, const int32_t *key, size_t key_n, TokIds *out, int *finish_stop) {
    pthread_mutex_lock(&m->mu);
    Entry *e = find(m, key, key_n);
    if (e) {
        e->used = ++m->clock;
        for (size_t i = 0; i < e->n; i++) tokids_push(out, e->ids[i]);
        *finish_stop = e->stop;
    }
    pthread_mutex_unlock(&m->mu);
    return e != NULL;
}

static int32_t *dup_ids(const int32_t *v, size_t n) {
    int32_t *c = df_malloc((n ? n : 1) * sizeof *c);
    if (n) memcpy(c, v, n * sizeof *c);
    return c;
}

void memo_put(Memo *m, const int32_t *key, size_t key_n, const int32_t *ids, size_t n, int finish_stop) {
    if (!m->cap) return;
    pthread_mutex_lock(&m->mu);
    Entry *e = find(m, key, key_n);
    if (!e) { /* the empty or least recently used slot */
        e = &m->e[0];
        for (int i = 1; i < m->cap && e->used; i++)
            if (m->e[i].used < e->used) e = &m->e[i];
    }
    entry_clear(e);
    *e = (Entry){dup_ids(key, key_n), dup_ids(ids, n), key_n, n, finish_stop, ++m->clock};
    pthread_mutex_unlock(&m->mu);
}

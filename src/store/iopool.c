#include "store/iopool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

typedef struct {
    IoJob *head, *tail;
} Queue;

struct IoPool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    Queue urgent, background;
    int stop;
    int n;
    pthread_t *threads;
};

static void push(Queue *q, IoJob *j) {
    j->next = NULL;
    if (q->tail) q->tail->next = j;
    else q->head = j;
    q->tail = j;
}

static IoJob *pop(Queue *q) {
    IoJob *j = q->head;
    if (j && !(q->head = j->next)) q->tail = NULL;
    return j;
}

static int unlink_job(Queue *q, IoJob *j) {
    IoJob *prev = NULL;
    for (IoJob *at = q->head; at; prev = at, at = at->next)
        if (at == j) {
            if (prev) prev->next = j->next;
            else q->head = j->next;
            if (q->tail == j) q->tail = prev;
            return 1;
        }
    return 0;
}

static void *worker(void *arg) {
    IoPool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        IoJob *j = pop(&p->urgent);
        if (!j) j = pop(&p->background);
        if (!j) {
            if (p->stop) break;
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        j->queued = 0;
        pthread_mutex_unlock(&p->mu);
        j->run(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

IoPool *iopool_create(int n_threads) {
    IoPool *p = df_calloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    p->threads = df_calloc((size_t)n_threads, sizeof *p->threads);
    for (; p->n < n_threads; p->n++) {
        int err = pthread_create(&p->threads[p->n], NULL, worker, p);
        if (err) {
            iopool_destroy(p); /* joins the threads started so far */
            df_fail("cannot start an I/O thread: %s", strerror(err));
            return NULL;
        }
    }
    return p;
}

void iopool_destroy(IoPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->urgent.head = p->urgent.tail = p->background.head = p->background.tail = NULL;
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    free(p->threads);
    free(p);
}

int iopool_threads(const IoPool *p) { return p->n; }

void iopool_submit(IoPool *p, IoJob *job, int urgent) {
    pthread_mutex_lock(&p->mu);
    job->queued = 1;
    push(urgent ? &p->urgent : &p->background, job);
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void iopool_promote(IoPool *p, IoJob *job) {
    pthread_mutex_lock(&p->mu);
    if (job->queued && unlink_job(&p->background, job)) push(&p->urgent, job);
    pthread_mutex_unlock(&p->mu);
}

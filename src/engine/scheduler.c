/* scheduler.c - the model thread: slots, admission between passes, batched passes, picks handed
 * to jobs (see scheduler.h). */
#include "engine/scheduler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/err.h"

struct Job {
    Scheduler *s;
    Job *next;              /* waiting list (s->mu) */
    /* set at submit, then the model thread's */
    TokIds prompt;
    Sampler sampler;
    LogitBias bias[SAMPLE_MAX_BIAS];
    int max_new, stop_token, want_info;
    Matcher *matcher;       /* the output constraint, or NULL */
    int unbudgeted;         /* its masks promise nothing about completing within the budget */
    uint64_t *mask;         /* its allowed tokens at the current step */
    int slot;               /* -1 while waiting */
    int begun;              /* its prompt's start is settled (the prompt cache, the slot's held
                             * tokens): done by the model thread outside the lock */
    size_t fed;             /* prompt tokens the slot holds */
    int picks;              /* tokens handed over */
    double t_submit, t_admit, t_first, t_last;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *toks;
    SampleInfo *infos;      /* with logprobs: one per token */
    size_t n, cap, taken;
    int ended;              /* 1: no more tokens; -1: failed (err) */
    char err[256];
    int cancelled, consumer_done, sched_done;
    JobStats stats;
};

typedef struct {
    Session sess;
    Job *job;               /* NULL: free (changed by the model thread only, under s->mu) */
    double last_used;
    int snap_unkept;        /* its snapshot holds a finished prompt not yet offered to the prompt cache */
    int keep_now;           /* its job ended: offer the snapshot before the slot takes another */
} Slot;

struct Scheduler {
    Engine *e;
    SchedOptions o;
    Slot *slots;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;
    Job *wait_head, *wait_tail;
    int waiting, running, stop, thread_started;
    double pass_s;          /* seconds of the latest decode pass */
    Spec spec;              /* speculation's policy for lone steps, shared by the slots: whether
                             * drafts pay is a property of the model and the machine, not of a slot */
    float *logits;          /* [MODEL_BATCH_ROWS][vocab]: a pass's last row of each sequence */
    int32_t *pass_tokens;   /* [the model's max_rows] a pass's tokens */
};

/* --- the job's side (any thread) --- */

static void job_free(Job *j) {
    matcher_free(j->matcher);
    free(j->mask);
    tokids_free(&j->prompt);
    sampler_free(&j->sampler);
    free(j->toks);
    free(j->infos);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

Job *sched_submit(Scheduler *s, const JobSpec *spec) {
    Job *j = df_calloc(1, sizeof *j);
    SampleParams p = spec->sample;
    if (p.n_bias > 0) memcpy(j->bias, p.bias, sizeof j->bias[0] * (size_t)p.n_bias);
    p.bias = j->bias;
    if (sampler_init(&j->sampler, &p, s->e->cat.cfg.vocab)) {
        free(j);
        return NULL;
    }
    j->s = s;
    tokids_reserve(&j->prompt, spec->n);
    memcpy(j->prompt.v, spec->prompt, sizeof *spec->prompt * spec->n);
    j->prompt.n = spec->n;
    j->max_new = spec->max_new;
    j->stop_token = spec->stop_token;
    if ((j->matcher = spec->matcher)) j->mask = df_malloc(sizeof *j->mask * matcher_mask_words(j->matcher));
    j->unbudgeted = spec->unbudgeted;
    j->want_info = p.logprobs;
    j->slot = -1;
    j->stats.slot = -1;
    j->t_submit = df_now();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->wait_tail) s->wait_tail->next = j;
    else s->wait_head = j;
    s->wait_tail = j;
    s->waiting++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return j;
}

int job_next(Job *j, int *tok, SampleInfo *info, int (*cancel)(void *ctx), void *ctx) {
    if (cancel && cancel(ctx)) { /* between tokens too, not only while waiting for one */
        pthread_mutex_lock(&j->mu);
        j->cancelled = 1;
        pthread_mutex_unlock(&j->mu);
        return 2;
    }
    pthread_mutex_lock(&j->mu);
    while (j->taken == j->n && !j->ended) {
        struct timespec ts = df_deadline(0.1);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->taken == j->n && !j->ended && cancel && cancel(ctx)) {
            j->cancelled = 1;
            pthread_mutex_unlock(&j->mu);
            return 2;
        }
    }
    int rc = 1;
    if (j->taken < j->n) {
        *tok = j->toks[j->taken];
        if (info) {
            if (j->infos) *info = j->infos[j->taken];
            else info->logprob = 0, info->n_top = 0;
        }
        j->taken++;
        rc = 0;
    } else if (j->ended < 0)
        rc = df_fail("%s", j->err);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

JobStats job_stats(Job *j) {
    pthread_mutex_lock(&j->mu);
    JobStats st = j->stats;
    pthread_mutex_unlock(&j->mu);
    return st;
}

void job_done(Job *j) {
    pthread_mutex_lock(&j->mu);
    j->consumer_done = j->cancelled = 1;
    int last = j->sched_done;
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

/* --- the model thread's side --- */

/* The scheduler lets go of a job; it is freed when its consumer is done too. */
static void release(Job *j) {
    pthread_mutex_lock(&j->mu);
    j->sched_done = 1;
    int last = j->consumer_done;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

static void end_job(Job *j, int how, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->ended) {
        j->ended = how;
        if (msg) snprintf(j->err, sizeof j->err, "%s", msg);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Hands a pick over to the job's consumer. */
static void hand_over(Job *j, int tok, const SampleInfo *info) {
    double now = df_now();
    pthread_mutex_lock(&j->mu);
    if (j->n == j->cap) {
        j->cap = j->cap ? 2 * j->cap : 64;
        j->toks = df_realloc(j->toks, sizeof *j->toks * j->cap);
        if (j->want_info) j->infos = df_realloc(j->infos, sizeof *j->infos * j->cap);
    }
    j->toks[j->n] = tok;
    if (j->want_info) j->infos[j->n] = *info;
    j->n++;
    if (!j->picks) j->t_first = now, j->stats.prefill_s = now - j->t_admit;
    j->t_last = now;
    j->stats.decode_s = now - j->t_first;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    j->picks++;
}

/* After a pick: the job ends on its stop token, its budget, or a full context. */
static void after_pick(Scheduler *s, Job *j, int tok) {
    const Session *sess = &s->slots[j->slot].sess;
    DF_INVARIANT(j->picks == (int)j->n, "job: %d picks, %zu tokens handed over", j->picks, j->n); /* (j->n: ours alone) */
    if (tok == j->stop_token || (j->max_new >= 0 && j->picks >= j->max_new) || (int)sess->held.n >= s->e->max_context)
        end_job(j, 1, NULL);
}

/* Tokens the job may still generate, this one included: its budget and the context left. */
static int64_t budget_left(const Scheduler *s, const Job *j) {
    int64_t room = (int64_t)s->e->max_context - (int64_t)s->slots[j->slot].sess.held.n;
    if (j->max_new >= 0 && j->max_new - j->picks < room) room = j->max_new - j->picks;
    return room;
}

/* The permitted tokens of a constrained job's next pick (NULL: unconstrained, or the model's own
 * greedy choice is permitted anyway). Returns 0, or -1 with a message. */
static int constraint_mask(Scheduler *s, Job *j, const uint64_t **mask) {
    *mask = NULL;
    if (!j->matcher) return 0;
    Session *sess = &s->slots[j->slot].sess;
    int64_t budget = j->unbudgeted ? -1 : budget_left(s, j);
    if (j->sampler.plain) { /* greedy: one cheap check of the argmax before a whole mask */
        int best = model_argmax(s->e->model, sess->rows + (size_t)sess->at * s->e->cat.cfg.vocab);
        if (matcher_allows(j->matcher, best, budget)) return 0;
    }
    int n = matcher_mask(j->matcher, budget, j->mask);
    if (n < 0) return -1;
    if (n == 0) return df_fail("the output constraint allows no token here (budget %lld)", (long long)budget);
    *mask = j->mask;
    return 0;
}

/* The slot's next pick (from logits already computed) for its job. */
static void pick(Scheduler *s, Job *j) {
    Session *sess = &s->slots[j->slot].sess;
    int tok;
    SampleInfo info;
    const uint64_t *mask;
    if (constraint_mask(s, j, &mask) || session_pick(sess, &j->sampler, mask, (uint64_t)j->picks, &tok, &info) ||
        (j->matcher && matcher_accept(j->matcher, tok))) {
        end_job(j, -1, df_errmsg());
        return;
    }
    sampler_accept(&j->sampler, tok);
    hand_over(j, tok, &info);
    after_pick(s, j, tok);
}

/* A lone greedy constrained job: the pick session_next made (speculation verifies drafts with
 * the model's own argmax) kept when the matcher allows it, else made again under the mask from
 * the same row (session_pick then drops the verified rows that assumed the other token). The
 * same choice as constraint_mask's in a batch. Returns 0, or -1 with a message. */
static int constrain_pick(Scheduler *s, Job *j, int *tok, SampleInfo *info) {
    if (!j->matcher) return 0;
    Session *sess = &s->slots[j->slot].sess;
    int64_t budget = j->unbudgeted ? -1 : budget_left(s, j);
    if (!matcher_allows(j->matcher, *tok, budget)) {
        int n = matcher_mask(j->matcher, budget, j->mask);
        if (n < 0) return -1;
        if (n == 0) return df_fail("the output constraint allows no token here (budget %lld)", (long long)budget);
        if (session_pick(sess, &j->sampler, j->mask, (uint64_t)j->picks, tok, info)) return -1;
    }
    return matcher_accept(j->matcher, *tok);
}

/* Session's own step (a speculative one, or one whose pick a verify pass already computed),
 * under the scheduler's speculation policy. */
static void step_alone(Scheduler *s, Job *j) {
    Session *sess = &s->slots[j->slot].sess;
    int tok;
    SampleInfo info;
    int more = j->max_new < 0 ? -1 : j->max_new - j->picks - 1; /* drafts past the budget would be verified for nothing */
    sess->spec = s->spec;
    int rc = session_next(sess, &j->sampler, (uint64_t)j->picks, &tok, &info, more, NULL, NULL);
    pthread_mutex_lock(&s->mu); /* (sched_spec reads it) */
    s->spec = sess->spec;
    pthread_mutex_unlock(&s->mu);
    if (rc == 0 && constrain_pick(s, j, &tok, &info)) rc = -1;
    if (rc == 1) end_job(j, 1, NULL);
    else if (rc < 0) end_job(j, -1, df_errmsg());
    else {
        sampler_accept(&j->sampler, tok);
        hand_over(j, tok, &info);
        after_pick(s, j, tok);
    }
}

static int live(Job *j) {
    pthread_mutex_lock(&j->mu);
    int on = !j->ended && !j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return on;
}

static void note_pass(Scheduler *s, double seconds) {
    pthread_mutex_lock(&s->mu);
    s->pass_s = seconds;
    pthread_mutex_unlock(&s->mu);
}

/* The rows of one pass: n sequences (at most MODEL_BATCH_ROWS), T rows (at most the model's window). */
typedef struct {
    State *states[MODEL_BATCH_ROWS];
    int rows[MODEL_BATCH_ROWS];
    Job *jobs[MODEL_BATCH_ROWS];
    int32_t *tokens;
    int n, T;
} Pass;

static void add_rows(Pass *p, Job *j, State *st, const int32_t *toks, int rows) {
    p->states[p->n] = st;
    p->rows[p->n] = rows;
    p->jobs[p->n++] = j;
    memcpy(p->tokens + p->T, toks, sizeof *toks * (size_t)rows);
    p->T += rows;
}

/* Decoding jobs: a row each (or no forward at all when their pick is already computed). */
static void decode_rows(Scheduler *s, Pass *p) {
    for (int i = 0; i < s->o.parallel; i++) {
        Job *j = s->slots[i].job;
        if (!j || !j->begun || !live(j) || j->fed < j->prompt.n) continue;
        Session *sess = &s->slots[i].sess;
        int32_t tok = session_batch_token(sess);
        if (tok < 0) step_alone(s, j);
        else add_rows(p, j, sess->st, &tok, 1);
    }
}

/* Jobs reading their prompt, oldest first, share what rows are left. */
static void prefill_rows(Scheduler *s, Pass *p) {
    /* alone, a prompt takes a whole window (each routed expert read once for all of it); beside
     * decoding jobs, a small share, so that they are not held up long */
    int budget = p->T ? MODEL_BATCH_ROWS - p->T : model_max_rows(s->e->model);
    if (p->T && budget > s->o.prefill_rows) budget = s->o.prefill_rows;
    for (;;) {
        Job *first = NULL;
        for (int i = 0; i < s->o.parallel; i++) {
            Job *j = s->slots[i].job;
            int in_pass = 0;
            for (int k = 0; k < p->n && j; k++) in_pass |= p->jobs[k] == j;
            if (j && j->begun && !in_pass && live(j) && j->fed < j->prompt.n && (!first || j->t_admit < first->t_admit))
                first = j;
        }
        if (!first || budget <= 0) return;
        size_t left = first->prompt.n - first->fed;
        int rows = left < (size_t)budget ? (int)left : budget;
        add_rows(p, first, s->slots[first->slot].sess.st, first->prompt.v + first->fed, rows);
        budget -= rows;
    }
}

/* A job's whole prompt is in its slot: the prompt cache gets the State at this boundary, from the
 * snapshot once the job has ended (its reply is not delayed by the write), or now when the slot
 * keeps no snapshot. */
static void prompt_finished(Scheduler *s, Job *j) {
    if (!s->o.cache) return;
    Slot *slot = &s->slots[j->slot];
    if (slot->sess.snap) slot->snap_unkept = 1;
    else pcache_store(s->o.cache, slot->sess.st, j->prompt.v, j->prompt.n);
}

/* model_watch_layers' function for a pass that only reads one prompt: stop when its job is gone
 * (the client left), so a long window does not run on for nobody. */
static int job_gone(void *ctx, int layer, int n_layers) {
    (void)layer, (void)n_layers;
    return !live(ctx);
}

/* One pass over every running job. */
static void run_pass(Scheduler *s) {
    const int V = s->e->cat.cfg.vocab;
    Pass p = {.tokens = s->pass_tokens, .n = 0, .T = 0};
    int running = 0;
    Job *only = NULL;
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i].job && live(s->slots[i].job)) running++, only = s->slots[i].job;
    /* alone: Session's speculative step (a constrained job's when it decodes greedily: its
     * sampler then never needs the mask first) */
    if (running == 1 && only->fed == only->prompt.n && (!only->matcher || only->sampler.plain)) {
        double t0 = df_now();
        step_alone(s, only);
        note_pass(s, df_now() - t0);
        return;
    }
    decode_rows(s, &p);
    int decoding = p.n;
    prefill_rows(s, &p);
    if (!p.n) return;
    double t0 = df_now();
    Job *reader = !decoding && p.n == 1 ? p.jobs[0] : NULL; /* a window may stop for it (CPU device) */
    if (reader) model_watch_layers(s->e->model, job_gone, reader);
    int rc = model_forward_batch(s->e->model, p.states, p.tokens, p.rows, p.n, s->logits, 0);
    if (reader) model_watch_layers(s->e->model, NULL, NULL);
    if (rc == MODEL_STOPPED) return; /* its State as before the pass; the job is reaped next */
    if (rc) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", df_errmsg());
        for (int k = 0; k < p.n; k++) {
            session_reset(&s->slots[p.jobs[k]->slot].sess);
            end_job(p.jobs[k], -1, msg);
        }
        return;
    }
    if (decoding) note_pass(s, df_now() - t0);
    for (int k = 0, at = 0; k < p.n; at += p.rows[k], k++) {
        Job *j = p.jobs[k];
        Session *sess = &s->slots[j->slot].sess;
        session_batch_fed(sess, p.tokens + at, p.rows[k], s->logits + (size_t)k * V);
        if (j->fed < j->prompt.n) {
            j->fed += (size_t)p.rows[k];
            if (j->fed < j->prompt.n) continue;
            session_end_prompt(sess);
            prompt_finished(s, j);
        }
        pick(s, j);
    }
}

/* The free slot for a job: the one holding most of its prompt, else the least recently used. */
static int choose_slot(Scheduler *s, const Job *j) {
    int best = -1;
    size_t best_cover = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        if (s->slots[i].job) continue;
        size_t cover = session_reusable(&s->slots[i].sess, j->prompt.v, j->prompt.n);
        if (best < 0 || cover > best_cover || (cover == best_cover && s->slots[i].last_used < s->slots[best].last_used))
            best = i, best_cover = cover;
    }
    return best;
}

/* What the counters promise (scheduler.h): running counts the slots that hold a job, waiting the
 * jobs in the queue. */
static void check_counts(const Scheduler *s) {
    int held = 0, queued = 0;
    for (int i = 0; i < s->o.parallel; i++) held += s->slots[i].job != NULL;
    for (const Job *j = s->wait_head; j; j = j->next) queued++;
    DF_INVARIANT(held == s->running && queued == s->waiting, "%d slots hold jobs, running %d; %d queued, waiting %d", held,
                 s->running, queued, s->waiting);
    (void)held, (void)queued;
}

/* Between passes (under s->mu): jobs that ended leave their slots, waiting ones take free slots. */
static void reap_and_admit(Scheduler *s) {
    for (int i = 0; i < s->o.parallel; i++) {
        Job *j = s->slots[i].job;
        if (!j || live(j)) continue;
        s->slots[i].keep_now = s->slots[i].snap_unkept;
        s->slots[i].snap_unkept = 0;
        s->slots[i].job = NULL;
        s->slots[i].last_used = df_now();
        s->running--;
        end_job(j, 1, NULL);
        release(j);
    }
    for (Job **pp = &s->wait_head; *pp;) { /* cancelled while waiting */
        Job *j = *pp;
        if (live(j)) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        s->waiting--;
        end_job(j, 1, NULL);
        release(j);
    }
    s->wait_tail = NULL;
    for (Job *j = s->wait_head; j; j = j->next) s->wait_tail = j;
    while (s->wait_head) {
        Job *j = s->wait_head;
        int slot = choose_slot(s, j);
        if (slot < 0) return;
        s->wait_head = j->next;
        if (!s->wait_head) s->wait_tail = NULL;
        s->waiting--;
        j->slot = slot;
        j->t_admit = df_now();
        pthread_mutex_lock(&j->mu);
        j->stats.wait_s = j->t_admit - j->t_submit;
        j->stats.slot = slot;
        pthread_mutex_unlock(&j->mu);
        s->slots[slot].job = j;
        s->running++;
    }
    check_counts(s);
}

/* Outside the lock (disk writes): the snapshots of jobs that ended go to the prompt cache. */
static void keep_finished(Scheduler *s) {
    for (int i = 0; i < s->o.parallel; i++) {
        Session *sess = &s->slots[i].sess;
        if (s->slots[i].keep_now && sess->snap && sess->snap_held.n)
            pcache_store(s->o.cache, sess->snap, sess->snap_held.v, sess->snap_held.n);
        s->slots[i].keep_now = 0;
    }
}

/* Outside the lock (disk reads): after keep_finished, each newly admitted job starts its prompt:
 * from the slot's held tokens or snapshot, or from a longer prompt cache entry. */
static void begin_admitted(Scheduler *s) {
    if (s->o.cache) keep_finished(s);
    for (int i = 0; i < s->o.parallel; i++) {
        Job *j = s->slots[i].job;
        if (!j || j->begun) continue;
        Session *sess = &s->slots[i].sess;
        size_t cached = 0, reused = 0;
        j->begun = 1;
        if (!live(j)) continue; /* cancelled while waiting: reaped next */
        if (s->o.cache)
            cached = pcache_restore(s->o.cache, sess, j->prompt.v, j->prompt.n,
                                    session_reusable(sess, j->prompt.v, j->prompt.n));
        if (session_begin_prompt(sess, j->prompt.v, j->prompt.n, &reused)) {
            end_job(j, -1, df_errmsg());
            continue;
        }
        j->fed = reused;
        pthread_mutex_lock(&j->mu);
        j->stats.reused = reused;
        j->stats.cached = cached && reused == cached ? cached : 0;
        pthread_mutex_unlock(&j->mu);
    }
}

static void *model_loop(void *arg) {
    Scheduler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        reap_and_admit(s);
        int keep = 0;
        for (int i = 0; i < s->o.parallel; i++) keep |= s->slots[i].keep_now;
        if (!s->running && !keep) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        begin_admitted(s); /* slot assignments change only on this thread: read without the lock */
        run_pass(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

Scheduler *sched_start(Engine *e, const SchedOptions *o) {
    if (o->parallel < 1 || o->parallel > MODEL_BATCH_ROWS)
        return df_fail("--parallel %d is outside 1..%d", o->parallel, MODEL_BATCH_ROWS), NULL;
    if (o->prefill_rows < 1 || o->prefill_rows > MODEL_BATCH_ROWS)
        return df_fail("prefill rows per pass %d is outside 1..%d", o->prefill_rows, MODEL_BATCH_ROWS), NULL;
    Scheduler *s = df_calloc(1, sizeof *s);
    s->e = e;
    s->o = *o;
    s->slots = df_calloc((size_t)o->parallel, sizeof *s->slots);
    for (int i = 0; i < o->parallel; i++) {
        session_init(&s->slots[i].sess, e);
        if (o->snapshots) session_keep_snapshots(&s->slots[i].sess);
    }
    s->spec = s->slots[0].sess.spec;
    s->logits = df_malloc(sizeof *s->logits * (size_t)e->cat.cfg.vocab * MODEL_BATCH_ROWS);
    s->pass_tokens = df_malloc(sizeof *s->pass_tokens * (size_t)model_max_rows(e->model));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    if (pthread_create(&s->thread, NULL, model_loop, s)) {
        df_fail("scheduler: cannot start the model thread");
        sched_stop(s);
        return NULL;
    }
    s->thread_started = 1;
    return s;
}

void sched_stop(Scheduler *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    for (int i = 0; i < s->o.parallel; i++) {
        if (s->slots[i].job) end_job(s->slots[i].job, -1, "the server is stopping"), release(s->slots[i].job);
        s->slots[i].keep_now |= s->slots[i].snap_unkept; /* finished prompts still go to the prompt cache */
    }
    if (s->o.cache) keep_finished(s);
    while (s->wait_head) {
        Job *j = s->wait_head;
        s->wait_head = j->next;
        end_job(j, -1, "the server is stopping");
        release(j);
    }
    for (int i = 0; i < s->o.parallel; i++) session_free(&s->slots[i].sess);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s->slots);
    free(s->logits), free(s->pass_tokens);
    free(s);
}

Spec sched_spec(Scheduler *s) {
    pthread_mutex_lock(&s->mu);
    Spec sp = s->spec;
    pthread_mutex_unlock(&s->mu);
    return sp;
}

void sched_load(Scheduler *s, int *running, int *waiting, double *pass_s) {
    pthread_mutex_lock(&s->mu);
    *running = s->running, *waiting = s->waiting, *pass_s = s->pass_s;
    pthread_mutex_unlock(&s->mu);
}

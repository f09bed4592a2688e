/* scheduler.h - several generations decoded together: one model thread runs a loop of passes,
 * each feeding every running sequence's next row (and a chunk of a prompt being read) through
 * one model_forward_batch, so every weight is read once per pass for all of them and each
 * routed expert once for all the rows that chose it.
 *
 * Slots. The scheduler has `parallel` slots, each a Session (a State that remembers its tokens,
 * with its own prompt-boundary snapshot when asked for). A submitted Job waits for a free slot
 * and takes, among the free ones, the slot whose held tokens (or snapshot) cover the most of its
 * prompt, so the next turn of a conversation lands where the previous one left off.
 *
 * A pass. Jobs join at the next pass (between passes, never during one). Each decoding job
 * contributes the row of its last pick; a job reading its prompt contributes a chunk of it: up
 * to the model's window (model_max_rows) when nothing else runs, so that each routed expert is
 * read once for the whole window, else at most `prefill_rows`, so a long prompt delays the running
 * decodes by a small chunk per pass, not by its whole prefill. After the
 * pass each job whose prompt is complete, or that was decoding, picks its next token (its own
 * Sampler and position: the same choice as alone) and hands it over. A lone decoding job (nothing
 * else running) takes Session's speculative step instead (n-gram drafts verified in one pass,
 * under one speculation policy for all slots, so what one job learned about drafting carries
 * over to the next);
 * in a batch the rows are plain (a verify pass per sequence would multiply the rows of a pass,
 * and with them the experts read). Rows are computed independently, so every job gets exactly the
 * tokens it would get alone (bit for bit for greedy decoding).
 *
 * A constrained job (JobSpec.matcher) picks among the tokens its matcher allows, with the budget
 * left (max_new and the context), so its reply always completes within it. Alone and greedy it
 * speculates like any lone job: drafts are verified with the model's own choice, and a pick the
 * matcher refuses is made again under its mask (the verified rows after it dropped).
 *
 * A job ends when its stop token is picked (handed over, never fed), after max_new tokens, when
 * the context is full, when the forward fails (every job of that pass fails and its slot is
 * reset), or when its consumer calls job_done (noticed at the next pass; the slot keeps what was
 * fed). The picks wait in the job until job_next takes them, so a slow reader slows nobody.
 *
 * Threads: sched_submit, job_next and job_done are called from any thread (the server's
 * connection threads); only the model thread touches the Sessions and the model. A Job is freed
 * when both its consumer (job_done) and the scheduler are done with it. */
#ifndef DF_SCHEDULER_H
#define DF_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/matcher.h"

typedef struct Scheduler Scheduler;
typedef struct Job Job;

typedef struct {
    int parallel;       /* slots: sequences decoded together (1..MODEL_BATCH_ROWS) */
    int snapshots;      /* each slot keeps a prompt-boundary snapshot */
    int prefill_rows;   /* rows of a prompt per pass while other jobs decode (1..MODEL_BATCH_ROWS) */
    PromptCache *cache; /* prompts' States kept on disk (prompt_cache.h; borrowed), or NULL */
} SchedOptions;

typedef struct {
    const int32_t *prompt;  /* copied */
    size_t n;
    SampleParams sample;    /* bias copied */
    int max_new;            /* tokens to hand over at most; -1: until the context is full */
    int stop_token;         /* ends the job when picked (handed over, not fed); -1: none */
    Matcher *matcher;       /* the output constraint (taken over and freed with the job), or NULL */
    int unbudgeted;         /* the matcher gets no budget (no promise to complete within max_new) */
} JobSpec;

/* What a job's consumer reads about it (under the job's lock: a snapshot). */
typedef struct {
    size_t reused;          /* prompt tokens not fed again (held by the slot or its snapshot, or
                             * read from the prompt cache) */
    size_t cached;          /* of those, the tokens read from the prompt cache */
    double wait_s;          /* submitted until a slot took it */
    double prefill_s;       /* slot taken until its first token */
    double decode_s;        /* first token until the last one handed over */
    int slot;               /* -1 until admitted */
} JobStats;

/* Starts the model thread. Borrows e (and its model) until sched_stop. Returns NULL with a
 * message when the options are out of range or the thread cannot start. */
Scheduler *sched_start(Engine *e, const SchedOptions *o);
/* Ends every job (their consumers get -1 "the server is stopping"), joins the thread, frees. */
void sched_stop(Scheduler *s);

/* A new job, waiting for a slot (the caller bounds how many may wait: the server's gate). It takes
 * over spec->matcher. Returns NULL with a message when its sampling parameters do not fit the
 * vocabulary (the matcher is then the caller's still). */
Job *sched_submit(Scheduler *s, const JobSpec *spec);
/* The next token handed over, waiting for it (polling cancel first and every 100 ms while
 * waiting; a fired cancel ends the job). Returns 0 with *tok (and *info when not NULL), 1 when the job ended without
 * more tokens (max_new reached, stop token handed over, context full), 2 when cancelled, or -1
 * with a message (the forward failed). */
int job_next(Job *j, int *tok, SampleInfo *info, int (*cancel)(void *ctx), void *ctx);
JobStats job_stats(Job *j);
/* The consumer is done: the job stops at the next pass if it still runs. j is invalid after. */
void job_done(Job *j);

/* Speculation's counters over the lone steps so far (spec.h). */
Spec sched_spec(Scheduler *s);
/* Jobs running in slots and waiting for one, and seconds per pass of the latest decode pass. */
void sched_load(Scheduler *s, int *running, int *waiting, double *pass_s);

#endif

/* exchange.h - one generation request from prompt to finish, independent of HTTP: renders the
 * prompt, then yields the reply one token at a time (from the model through a scheduler Job, or
 * replayed from the memo), and records the result in the memo when it completes. Streamed and
 * whole responses are both built from exchange_step. The Exchange owns its token lists, reply
 * parser and Job; it borrows the tokenizer, the memo and the scheduler. */
#ifndef DF_EXCHANGE_H
#define DF_EXCHANGE_H

#include <stdint.h>

#include "engine/session.h"
#include "engine/sampler.h"
#include "engine/repeat.h"
#include "engine/scheduler.h"
#include "serve/memo.h"
#include "serve/reply.h"
#include "serve/request.h"
#include "serve/stopseq.h"
#include "text/matcher.h"
#include "serve/wire.h"

typedef struct {
    ApiKind kind;
    char id[48];
    WireHead head;
    TokIds prompt, key, out; /* rendered prompt; memo key; tokens generated (fed to the reply) */
    int max_new;             /* completion-token budget; -1 for none */
    TokIds replay;           /* from the memo */
    size_t replay_at;
    int replay_stop, from_memo;
    Reply reply;
    StopSeq stop;            /* cuts the answer at a stop sequence */
    StrBuf reasoning, content; /* what the client got so far (after the stop filter) */
    size_t reused;           /* prompt tokens not fed again (held by the slot or its snapshot) */
    int started, finished, completion;
    int reasoning_tokens;    /* of the completion, those generated while thinking */
    const char *finish;      /* "stop" | "length" | "tool_calls" once finished */
    const char *detail;      /* why a "length" finish came early, or NULL: "repetition" (the
                              * repetition stop ended a loop), "thinking" (the budget ran out
                              * before the thinking ended: no answer) */
    RepeatGuard repeat;      /* the repetition stop's view of the reply */
    int watch_repeat;        /* the repetition stop applies (a chat whose shape is free) */
    double t_first, t_last;  /* df_now() of the first and the latest token (0: none yet) */
    int stop_index;          /* finish "stop" by a stop sequence: which one (-1: none) */
    double prefill_s, model_s; /* from a slot to the first token; and to the last one */
    double wait_s;           /* waiting for a slot */
    int slot;                /* the scheduler's slot that ran it (-1: none) */
    SampleParams sample;     /* how each token is chosen (greedy unless the request samples) */
    LogitBias bias[SAMPLE_MAX_BIAS];
    int plain;               /* greedy with nothing else: the answer is a function of the memo key */
    Job *job;                /* the generation in the scheduler, once started */
    Grammar *grammar;        /* the output constraint (response_format, tool_choice), or NULL */
    Matcher *matcher;        /* its state for this reply, until the job takes it over */
    int unbudgeted;          /* the matcher gets no budget: the reply may be cut short (tool_choice none) */
    uint64_t seed;           /* the request's, or a random one when it gave none */
    /* with logprobs: OpenAI token entries {token, logprob, bytes, top_logprobs} of the tokens
     * whose text the client reads: a chat's split by channel (thinking, answer; the chat
     * format's markers and headers have none), a completion's all in content */
    json_t *lp_content, *lp_reasoning;
    json_t *lp_step;         /* the entries the last step added (content, reasoning) or NULL */
    int lp_step_reasoning;   /* the last step's entry went to lp_reasoning */
} Exchange;

typedef struct {
    const Tokenizer *tok;
    Memo *memo;
    int eos;                 /* <|end_of_msg|>: a chat reply ends there */
    int64_t max_tokens_cap;  /* K3_SERVER_MAX_TOKENS, -1 for none */
    int64_t answer_tokens;   /* a chat's budget when the request gives none; -1: until the context is full */
    int repeat_stop;         /* end chats caught in a loop (engine/repeat.h) */
    int context;             /* positions */
    const char *effort;      /* K3_REASONING_EFFORT: thinking effort when the request names none; NULL: max */
    const VocabTrie *trie;   /* the vocabulary as constrained decoding walks it (text/vocab_trie.h) */
    const char *model_id;    /* the served model's name, in every answer */
} ExchangeEnv;

/* Renders the request's prompt, checks its sampling against the vocabulary, compiles its output
 * constraint (every chat has one: no call of a tool the request did not declare, an answer that
 * is not empty unless calls follow; and response_format, tool_choice, strict arguments) and
 * looks it up in the memo (greedy requests without log-probabilities only). Returns 0, or -1 with *err filled (a 400 for a
 * prompt that does not render or does not fit the context, a logit_bias id outside the
 * vocabulary, a constraint that does not compile, or a max_tokens too small to complete it). */
int exchange_init(Exchange *x, const ExchangeEnv *env, const ApiRequest *r, ApiError *err);
/* The request's prompt ids (what exchange_init renders), appended to out: what usage reports as
 * prompt tokens and count_tokens counts. Returns 0, or -1 with *err filled. */
int exchange_prompt(const ExchangeEnv *env, const ApiRequest *r, TokIds *out, ApiError *err);
void exchange_free(Exchange *x);

/* 1 when the reply needs the model (not a memo replay, and a budget above 0). */
int exchange_needs_model(const Exchange *x);
/* Submits the generation to the scheduler (the caller holds one of its seats). Returns 0, or -1
 * with a message. */
int exchange_start(Exchange *x, const ExchangeEnv *env, Scheduler *s);

/* Produces the next piece of the reply. Returns 0 with *d set (possibly empty text), 1 when
 * finished (x->finish set; *d holds any released tail text), 2 when cancelled, or -1 with a
 * message. */
int exchange_step(Exchange *x, const ExchangeEnv *env, CancelFn cancel, void *ctx, ReplyDelta *d);

/* The most tokens the exchange may still generate: what is left of its max_tokens budget
 * (max_tokens, K3_SERVER_MAX_TOKENS) or of the context, whichever is smaller. A chat without a
 * budget may run until the context is full, so that is what it counts. */
int64_t exchange_tokens_left(const Exchange *x, const ExchangeEnv *env);

/* Its pace so far: seconds per generated token (0 before two tokens, the first costing no
 * forward of its own) and prefill seconds per prompt token fed (0 before the prefill, or when
 * nothing was fed). */
void exchange_pace(const Exchange *x, double *decode, double *prefill);

/* The tool calls of a chat reply so far (OpenAI {"type", "function": {"name", "arguments"}}
 * objects, without ids), or NULL when there are none. Borrowed from the reply parser. */
const json_t *exchange_tool_calls(const Exchange *x);

#endif

/* chat.h - what the parts of `deltafin chat` share: the conversation (chat.c) and its file with
 * the model state (chat_save.c). */
#ifndef DF_CHAT_H
#define DF_CHAT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/tokids.h"
#include "text/xtml.h"

typedef struct {
    Engine *e;
    Tokenizer *tok;
    Session s;
    json_t *msgs;       /* the conversation as OpenAI messages */
    const char *system; /* the system message (--system, or a loaded conversation's), or NULL */
    char *system_copy;  /* owned: a loaded conversation's system message */
    XtmlOptions xo;
    int show_thinking, stats, tty, turn;
    int64_t max_new;
    int limit_default;  /* max_new is DELTAFIN_ANSWER_TOKENS (no -n) */
    int repeat_stop;    /* DELTAFIN_REPEAT_STOP */
    TokIds tail;        /* tokens that close the last reply, fed at the start of the next turn */
    TokIds unanswered;  /* the last turn stopped during its prefill: its prompt without the
                         * generation prompt (the State holds a prefix of it); else empty */
    char model_id[65];  /* the model's fingerprint (chat_model_id), "" until needed */
    Sampler sampler;    /* --temperature ...: the sampled choice */
    int sampling;       /* 0: greedy */
} Chat;

/* /save FILE: the conversation, its tokens and the settled model State, written atomically.
 * Refuses to replace a file that is not a chat file. Returns 0, or -1 with a message. */
int chat_save(Chat *c, const char *path);
/* /load FILE: everything checked (format, sizes, the model's fingerprint, the settings that
 * change the numbers) before the conversation is replaced; on failure it is left as it was.
 * Returns 0, or -1 with a message. */
int chat_load(Chat *c, const char *path);
/* The same from an open stream of `size` bytes (the whole file; name for messages): what
 * chat_load does once the file is open, and what the fuzzer feeds. */
int chat_load_stream(Chat *c, FILE *f, uint64_t size, const char *name);

#endif

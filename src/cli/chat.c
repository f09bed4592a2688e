/* deltafin chat - interactive multi-turn chat in the terminal.
 *
 * The model State lives across turns: after a reply, the next turn feeds only what is new (the
 * reply's last token and end marker, the user's message, the generation prompt), never the
 * history again. The new tokens come from rendering the whole conversation and checking that
 * the rendering without the new message is a token prefix of it; if it ever is not, the
 * conversation is re-rendered and prefilled from the start. Ctrl-C stops the current answer
 * (the text so far stays in the conversation); while the model is still reading the prompt it
 * stops that too, and the message stays in the conversation unanswered: the State keeps the
 * prompt's chunks fed so far, and the next turn continues that prompt without its generation
 * prompt (never fed: session.h), so only what is left is fed. At the prompt Ctrl-C discards the
 * line. Ctrl-D or /exit ends the session; /reset starts a new conversation. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "cli/sample_args.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "serve/reply.h"
#include "text/strbuf.h"
#include "text/tokenizer.h"
#include "text/xtml.h"
#include "util/err.h"

#define MAX_LINE (1 << 20)

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static int cancelled(void *ctx) {
    (void)ctx;
    return interrupted;
}

typedef struct {
    Engine e;
    Tokenizer *tok;
    Session s;
    json_t *msgs;       /* the conversation as OpenAI messages */
    const char *system; /* --system, or NULL */
    XtmlOptions xo;
    int show_thinking, stats, tty, turn;
    int64_t max_new;
    TokIds tail;        /* tokens that close the last reply, fed at the start of the next turn */
    TokIds unanswered;  /* the last turn stopped during its prefill: its prompt without the
                         * generation prompt (the State holds a prefix of it); else empty */
    Sampler sampler;    /* --temperature ...: the sampled choice */
    int sampling;       /* 0: greedy */
} Chat;

/* Reads one line (without the newline) into line. 1: got a line; 0: end of input; -1: Ctrl-C. */
static int read_line(StrBuf *line) {
    line->n = 0;
    sb_add(line, "", 0);
    for (;;) {
        int c = getchar();
        if (c == EOF) {
            if (ferror(stdin) && errno == EINTR) {
                clearerr(stdin);
                return -1;
            }
            return line->n ? 1 : 0;
        }
        if (c == '\n') return 1;
        if (line->n < MAX_LINE) {
            char ch = (char)c;
            sb_add(line, &ch, 1);
        }
    }
}

/* The tokens of the conversation plus the user's new message, as a continuation of what the
 * State holds (held + pending + tail + new, or after a stopped prefill unanswered + new), or
 * the whole rendering when that is impossible. */
static int next_prompt(Chat *c, const json_t *with_user, TokIds *prompt, int *continued) {
    TokIds prev = {0}, full = {0};
    XtmlOptions no_gen = c->xo;
    no_gen.gen_prompt = 0;
    int rc = xtml_render(c->tok, with_user, &c->xo, &full);
    if (!rc && json_array_size(c->msgs)) rc = xtml_render(c->tok, c->msgs, &no_gen, &prev);
    *continued = 0;
    if (!rc) {
        int prefix = prev.n <= full.n && (!prev.n || !memcmp(prev.v, full.v, prev.n * sizeof *prev.v));
        if (c->unanswered.n && prefix) {
            *continued = 1;
            tokids_reserve(prompt, c->unanswered.n + full.n - prev.n);
            for (size_t i = 0; i < c->unanswered.n; i++) tokids_push(prompt, c->unanswered.v[i]);
            for (size_t i = prev.n; i < full.n; i++) tokids_push(prompt, full.v[i]);
        } else if (c->s.held.n && prefix) {
            *continued = 1;
            tokids_reserve(prompt, c->s.held.n + 1 + c->tail.n + full.n - prev.n);
            for (size_t i = 0; i < c->s.held.n; i++) tokids_push(prompt, c->s.held.v[i]);
            if (session_pending(&c->s) >= 0) tokids_push(prompt, session_pending(&c->s));
            for (size_t i = 0; i < c->tail.n; i++) tokids_push(prompt, c->tail.v[i]);
            for (size_t i = prev.n; i < full.n; i++) tokids_push(prompt, full.v[i]);
        } else
            for (size_t i = 0; i < full.n; i++) tokids_push(prompt, full.v[i]);
    }
    tokids_free(&prev);
    tokids_free(&full);
    return rc;
}

static void show(Chat *c, const ReplyDelta *d, int *state) {
    /* state: 0 nothing shown, 1 thinking shown/indicated, 2 answer started */
    if (d->reasoning_len && *state < 2) {
        if (c->show_thinking) {
            if (*state == 0 && c->tty) fputs("\033[2m", stdout);
            fwrite(d->reasoning, 1, d->reasoning_len, stdout);
        } else if (*state == 0)
            fputs(c->tty ? "\033[2m(thinking...)\033[0m" : "(thinking...)", stdout);
        *state = 1;
    }
    if (d->content_len) {
        if (*state == 1) fputs(c->show_thinking ? (c->tty ? "\033[0m\n\n" : "\n\n") : (c->tty ? "\r\033[K" : "\n"), stdout);
        *state = 2;
        fwrite(d->content, 1, d->content_len, stdout);
    }
    fflush(stdout);
}

/* Closing markers for a reply cut short, so the State holds a well-formed conversation. */
static int closing_tail(Chat *c, int answered) {
    const char *text = answered ? "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
                                : "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
                                  "<|close|>message<|sep|><|end_of_msg|>";
    c->tail.n = 0;
    return tok_encode(c->tok, text, strlen(text), 1, &c->tail);
}

typedef struct {
    int generated, state, done, full; /* tokens shown; show() state; ended itself; context full */
} Answer;

/* Generates and shows the answer after the prefill. Returns 0 or -1 with a message. */
static int answer(Chat *c, Reply *reply, Answer *a) {
    Sampler *sm = c->sampling ? &c->sampler : NULL;
    if (sm) sampler_restart(sm); /* penalties count this answer's tokens */
    while (c->max_new < 0 || a->generated < c->max_new) {
        int more = c->max_new < 0 ? -1 : (int)(c->max_new - a->generated - 1);
        /* each turn draws from its own stretch of positions, so turns do not repeat each other */
        uint64_t pos = ((uint64_t)c->turn << 32) + (uint64_t)a->generated;
        int tok, r = session_next(&c->s, sm, pos, &tok, NULL, more, cancelled, NULL);
        if (r) {
            a->full = r == 1;
            if (r < 0) return -1;
            break;
        }
        ReplyDelta d;
        if (reply_feed(reply, tok, &d)) return -1;
        show(c, &d, &a->state);
        if (d.done) {
            a->done = 1;
            return 0;
        }
        if (sm) sampler_accept(sm, tok);
        a->generated++;
    }
    ReplyDelta d;
    reply_finish(reply, &d);
    show(c, &d, &a->state);
    return 0;
}

/* Keeps the finished exchange in the conversation; a cut answer gets its closing markers. */
static int remember(Chat *c, json_t **with_user, const Reply *reply, const Answer *a) {
    json_array_append_new(*with_user, json_pack("{s:s, s:s%, s:s%}", "role", "assistant", "content",
                                                reply->content.p ? reply->content.p : "", reply->content.n,
                                                "reasoning_content", reply->reasoning.p ? reply->reasoning.p : "",
                                                reply->reasoning.n));
    json_decref(c->msgs);
    c->msgs = *with_user;
    *with_user = NULL;
    c->tail.n = 0;
    return a->done ? 0 : closing_tail(c, !xtml_parser_in_thinking(reply->parser));
}

static int is_suffix(const TokIds *of, const TokIds *s) {
    return s->n <= of->n && !memcmp(of->v + of->n - s->n, s->v, s->n * sizeof *s->v);
}

/* A turn stopped during its prefill: the user's message stays in the conversation, unanswered,
 * and the next prompt starts with this one minus its generation prompt (the rendering of the
 * conversation with it, less the rendering without it), of which the State holds a prefix.
 * When that cannot be worked out, the State is dropped and the next turn renders it all. */
static int keep_unanswered(Chat *c, json_t **with_user, const TokIds *prompt) {
    TokIds full = {0}, bare = {0}, gen = {0};
    XtmlOptions no_gen = c->xo;
    no_gen.gen_prompt = 0;
    int rc = xtml_render(c->tok, *with_user, &c->xo, &full);
    if (!rc) rc = xtml_render(c->tok, *with_user, &no_gen, &bare);
    c->unanswered.n = 0;
    if (!rc && bare.n < full.n && !memcmp(bare.v, full.v, bare.n * sizeof *bare.v)) {
        for (size_t i = bare.n; i < full.n; i++) tokids_push(&gen, full.v[i]);
        if (is_suffix(prompt, &gen))
            for (size_t i = 0; i < prompt->n - gen.n; i++) tokids_push(&c->unanswered, prompt->v[i]);
    }
    if (!c->unanswered.n) session_reset(&c->s);
    json_decref(c->msgs);
    c->msgs = *with_user;
    *with_user = NULL;
    c->tail.n = 0;
    tokids_free(&full), tokids_free(&bare), tokids_free(&gen);
    return rc;
}

static int turn(Chat *c, const char *text) {
    json_t *with_user = json_deep_copy(c->msgs);
    json_array_append_new(with_user, json_pack("{s:s, s:s}", "role", "user", "content", text));
    TokIds prompt = {0};
    int continued, rc = next_prompt(c, with_user, &prompt, &continued);
    c->unanswered.n = 0; /* part of this prompt now */
    Reply reply;
    if (!rc) rc = reply_init(&reply, c->tok, 1);
    if (rc) {
        json_decref(with_user);
        tokids_free(&prompt);
        return -1;
    }
    interrupted = 0;
    size_t reused = 0;
    double p0 = c->s.prefill_s, d0 = c->s.decode_s;
    Answer a = {0};
    rc = session_prefill(&c->s, prompt.v, prompt.n, cancelled, NULL, &reused);
    size_t fed = c->s.held.n > reused ? c->s.held.n - reused : 0;
    int stopped_reading = rc == 1;
    if (!rc) rc = answer(c, &reply, &a);
    if (a.state == 1 && c->show_thinking && c->tty) fputs("\033[0m", stdout);
    fputs(rc == 1 || interrupted ? " [stopped]\n" : a.full ? " [context full]\n" : "\n", stdout);
    fflush(stdout);
    if (rc == 0) rc = remember(c, &with_user, &reply, &a);
    else if (rc == 1) rc = keep_unanswered(c, &with_user, &prompt);
    if (c->stats) {
        double dec = c->s.decode_s - d0;
        fprintf(stderr, "stats: turn %d: prompt %zu tokens, fed %zu (reused %zu from earlier turns%s) in %.3f s%s | "
                        "generated %d tokens%s, %.3f s/token\n",
                c->turn + 1, prompt.n, fed, reused, continued || !c->turn ? "" : "; history prefilled again",
                c->s.prefill_s - p0, stopped_reading ? ", stopped while reading the prompt" : "", a.generated,
                a.done ? " and the end marker" : "", a.generated ? dec / a.generated : 0.0);
    }
    c->turn++;
    json_decref(with_user);
    tokids_free(&prompt);
    reply_free(&reply);
    return rc;
}

/* A new conversation: only the system message (if any) remains. */
static void restart(Chat *c) {
    json_array_clear(c->msgs);
    if (c->system) json_array_append_new(c->msgs, json_pack("{s:s, s:s}", "role", "system", "content", c->system));
    session_reset(&c->s);
    c->tail.n = 0;
    c->unanswered.n = 0;
    c->turn = 0;
}

static void chat_loop(Chat *c) {
    StrBuf line = {0};
    for (;;) {
        fputs(c->tty ? "\033[1m>\033[0m " : "> ", stdout);
        fflush(stdout);
        int r = read_line(&line);
        if (r == 0) break;
        if (r < 0) {
            fputs("\n", stdout);
            continue;
        }
        if (!strcmp(line.p, "/exit") || !strcmp(line.p, "/quit")) break;
        if (!strcmp(line.p, "/reset")) {
            restart(c);
            continue;
        }
        if (!line.n) continue;
        if (turn(c, line.p)) {
            fprintf(stderr, "deltafin: %s (the conversation starts over)\n", df_errmsg());
            restart(c);
        }
    }
    sb_free(&line);
    fputs("\n", stdout);
}

int cmd_chat(const Settings *set, int argc, char **argv) {
    const char *model = NULL, *system = NULL, *effort = set->effort;
    Chat c;
    memset(&c, 0, sizeof c);
    int64_t max_new = -1;
    ArgSpec specs[6 + SAMPLE_ARG_SPECS] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"system", ARG_STR, &system, "a system message that opens the conversation"},
        {"show-thinking", ARG_FLAG, &c.show_thinking, "show the model's thinking (hidden by default)"},
        {"effort", ARG_STR, &effort, "thinking effort: low | high | max (default $K3_REASONING_EFFORT or max)"},
        {"max-new", ARG_INT, &max_new, "most tokens per answer (default: until the answer ends)"},
        {"stats", ARG_FLAG, &c.stats, "print token counts and speed after each answer"},
    };
    SampleArgs sargs;
    sample_args_specs(&sargs, specs + 6);
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 6 + SAMPLE_ARG_SPECS, pos, 0, &n_pos,
                   "deltafin chat [--model DIR] [--show-thinking] [--stats] [--temperature T ...]"))
        df_die("%s", df_errmsg());
    SampleParams sp;
    c.sampling = sample_args_finish(&sargs, &sp, stderr);
    if (max_new < -1 || max_new > (1 << 24)) df_die("chat: --max-new must be 1..16777216");
    if (effort && strcmp(effort, "low") && strcmp(effort, "high") && strcmp(effort, "max"))
        df_die("chat: --effort must be low, high or max, not '%s'", effort);
    c.max_new = max_new;
    if (engine_open(&c.e, settings_dir(set, model), &set->engine)) df_die("%s", df_errmsg());
    engine_print_settings(&c.e, stderr);
    if (!(c.tok = tok_load(c.e.cat.dir))) df_die("%s", df_errmsg());
    session_init(&c.s, &c.e);
    if (c.sampling && sampler_init(&c.sampler, &sp, c.e.cat.cfg.vocab)) df_die("%s", df_errmsg());
    c.xo = (XtmlOptions)XTML_OPTIONS_DEFAULT;
    c.xo.effort = effort;
    c.tty = isatty(STDOUT_FILENO);
    c.msgs = json_array();
    c.system = system;
    restart(&c);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts a read at the prompt */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "deltafin chat: Ctrl-C stops an answer, /reset starts over, Ctrl-D or /exit quits\n");
    chat_loop(&c);
    json_decref(c.msgs);
    tokids_free(&c.tail);
    tokids_free(&c.unanswered);
    session_free(&c.s);
    if (c.sampling) sampler_free(&c.sampler);
    tok_free(c.tok);
    engine_close(&c.e);
    return 0;
}

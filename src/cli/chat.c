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
 * line. Ctrl-D or /exit ends the session; /reset starts a new conversation; /save and /load keep
 * a conversation with its State in a file (chat_save.c); input comes through chat_input.h.
 *
 * Feedback (term.h): on a terminal a status line shows the reading of a long prompt and, while
 * the thinking is hidden, a live count of its tokens; the answer then starts with "(thought for N
 * tokens, T s)", and an answer cut short ends with why ([stopped], [--max-new N reached],
 * [context full], the answer limit, the repetition stop). Answers stop at DELTAFIN_ANSWER_TOKENS
 * unless -n says otherwise, and when they repeat one phrase over and over (DELTAFIN_REPEAT_STOP). */
#include <errno.h>
#include <jansson.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/chat_input.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "cli/interrupt.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/sample_args.h"
#include "cli/term.h"
#include "engine/engine.h"
#include "engine/repeat.h"
#include "engine/session.h"
#include "serve/reply.h"
#include "text/strbuf.h"
#include "text/tokenizer.h"
#include "util/clock.h"
#include "util/err.h"

/* The cancel hook of prefill and decode: Ctrl-C, and the prompt's progress while it is read. */
typedef struct {
    Session *s;
    size_t prompt;  /* tokens of the prompt being read; 0 once the answer started */
    PrefillMeter meter;
} Watch;

static int cancelled(void *ctx) {
    Watch *w = ctx;
    if (w && w->prompt) {
        if (!w->meter.started) prefill_meter_start(&w->meter, w->s->reading, w->prompt);
        prefill_meter_show(&w->meter, w->s->reading);
    }
    return interrupt_pending();
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

typedef struct {
    int generated, state, done, full; /* tokens shown; 0 nothing shown, 1 thinking, 2 answer; ended
                                       * itself; context full */
    int looped;                       /* the repetition stop ended it (engine/repeat.h) */
    RepeatGuard repeat;
    size_t calls_shown;               /* tool calls printed so far */
    double t0;                        /* when the first token was picked */
    double last_status;
} Answer;

static void out(const char *s) { term_write(stdout, s, strlen(s)); }

/* "(thought for 212 tokens, 9.3 s)": what hidden thinking cost, before the answer or the stop. */
static void thought(Chat *c, const Answer *a, const char *how) {
    char line[128], d[32];
    term_status_clear();
    snprintf(line, sizeof line, "%s(%s %d token%s, %s)%s", c->tty ? "\033[2m" : "", how, a->generated,
             a->generated == 1 ? "" : "s", term_duration(d, sizeof d, df_now() - a->t0), c->tty ? "\033[0m" : "");
    out(line);
}

/* Hidden thinking on a terminal: a live count on the status line (at most 10 times a second). */
static void thinking_status(Chat *c, Answer *a) {
    double now = df_now();
    if (c->show_thinking || a->state == 2 || now - a->last_status < 0.1) return;
    char d[32];
    a->last_status = now;
    term_status("thinking: %d token%s, %s (--show-thinking shows it; Ctrl-C stops)", a->generated,
                a->generated == 1 ? "" : "s", term_duration(d, sizeof d, now - a->t0));
}

/* The answer begins (its text or a tool call): the thinking is closed off first. */
static void begin_answer(Chat *c, Answer *a) {
    if (a->state == 1 && c->show_thinking) out(c->tty ? "\033[0m\n\n" : "\n\n");
    else if (a->state == 1) thought(c, a, "thought for"), out("\n");
    a->state = 2;
}

static void show(Chat *c, const Reply *reply, const ReplyDelta *d, Answer *a) {
    if (d->reasoning_len && a->state < 2) {
        if (c->show_thinking) {
            if (a->state == 0 && c->tty) out("\033[2m");
            term_write(stdout, d->reasoning, d->reasoning_len);
        }
        a->state = 1;
    }
    if (d->content_len) {
        begin_answer(c, a);
        term_write(stdout, d->content, d->content_len);
    }
    const json_t *calls = xtml_parser_tool_calls(reply->parser);
    if (json_array_size(calls) > a->calls_shown) { /* chat runs no tools: it shows what was asked */
        begin_answer(c, a);
        term_tool_calls(calls, &a->calls_shown);
    }
}

/* Closing markers for a reply cut short, so the State holds a well-formed conversation. */
static int closing_tail(Chat *c, int answered) {
    const char *text = answered ? "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
                                : "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
                                  "<|close|>message<|sep|><|end_of_msg|>";
    c->tail.n = 0;
    return tok_encode(c->tok, text, strlen(text), 1, &c->tail);
}

/* Generates and shows the answer after the prefill. Returns 0 or -1 with a message. */
static int answer(Chat *c, Reply *reply, Answer *a) {
    Sampler *sm = c->sampling ? &c->sampler : NULL;
    if (sm) sampler_restart(sm); /* penalties count this answer's tokens */
    a->t0 = df_now();
    while (c->max_new < 0 || a->generated < c->max_new) {
        int more = c->max_new < 0 ? -1 : (int)(c->max_new - a->generated - 1);
        /* each turn draws from its own stretch of positions, so turns do not repeat each other */
        uint64_t pos = ((uint64_t)c->turn << 32) + (uint64_t)a->generated;
        int tok, r = session_next(&c->s, sm, pos, &tok, NULL, more, interrupt_cancel, NULL);
        if (r) {
            a->full = r == 1;
            if (r < 0) return -1;
            break;
        }
        ReplyDelta d;
        if (reply_feed(reply, tok, &d)) return -1;
        show(c, reply, &d, a);
        if (d.done) {
            a->done = 1;
            return 0;
        }
        if (sm) sampler_accept(sm, tok);
        a->generated++;
        thinking_status(c, a);
        if (c->repeat_stop && repeat_push(&a->repeat, tok)) {
            a->looped = 1;
            break;
        }
    }
    ReplyDelta d;
    reply_finish(reply, &d);
    show(c, reply, &d, a);
    return 0;
}

/* How the answer ended, when it did not end by itself. */
static void ending(Chat *c, const Answer *a, int stopped) {
    char why[96] = "";
    if (stopped) snprintf(why, sizeof why, " [stopped]");
    else if (a->full) snprintf(why, sizeof why, " [context full: -c/--ctx-size]");
    else if (a->looped) snprintf(why, sizeof why, " [stopped: the answer repeats itself; --no-repeat-stop lets it run]");
    else if (!a->done && c->max_new >= 0 && a->generated >= c->max_new)
        snprintf(why, sizeof why, c->limit_default ? " [answer limit of %lld tokens reached: -n N for more]" : " [--max-new %lld reached]",
                 (long long)c->max_new);
    if (a->state == 1 && c->show_thinking && c->tty) out("\033[0m");
    if (a->state < 2 && !c->show_thinking && a->generated) thought(c, a, "still thinking after");
    term_status_clear();
    out(why);
    out("\n");
}

/* The reply's tool calls as an assistant message carries them (ids call_TURN_N), or NULL. */
static json_t *calls_of(const Chat *c, const Reply *reply) {
    const json_t *calls = xtml_parser_tool_calls(reply->parser);
    if (!json_array_size(calls)) return NULL;
    json_t *out = json_deep_copy(calls), *call;
    size_t i;
    json_array_foreach(out, i, call) {
        char id[48];
        snprintf(id, sizeof id, "call_%d_%zu", c->turn + 1, i + 1);
        json_object_set_new(call, "id", json_string(id));
    }
    return out;
}

/* Keeps the finished exchange in the conversation (tool calls included: the State holds them);
 * a cut answer gets its closing markers. */
static int remember(Chat *c, json_t **with_user, const Reply *reply, const Answer *a) {
    json_t *m = json_pack("{s:s, s:s%, s:s%}", "role", "assistant", "content", reply->content.p ? reply->content.p : "",
                          reply->content.n, "reasoning_content", reply->reasoning.p ? reply->reasoning.p : "",
                          reply->reasoning.n);
    json_t *calls = calls_of(c, reply);
    if (calls) json_object_set_new(m, "tool_calls", calls);
    json_array_append_new(*with_user, m);
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
    interrupt_clear();
    size_t reused = 0;
    double p0 = c->s.prefill_s, d0 = c->s.decode_s;
    Answer a = {0};
    Watch watch = {.s = &c->s, .prompt = prompt.n};
    rc = session_prefill(&c->s, prompt.v, prompt.n, cancelled, &watch, &reused);
    term_status_clear();
    size_t fed = c->s.held.n > reused ? c->s.held.n - reused : 0;
    int stopped_reading = rc == 1;
    if (!rc && c->sampling) sampler_context(&c->sampler, prompt.v, prompt.n); /* the repetition window */
    if (!rc) rc = answer(c, &reply, &a);
    ending(c, &a, rc == 1 || interrupt_pending());
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

static const char chat_help[] =
    "  /help          this list\n"
    "  /reset         start a new conversation (the model forgets everything said)\n"
    "  /save FILE     write the conversation and the model's state to FILE\n"
    "  /load FILE     continue a conversation saved with /save (same model and settings), without reading it again\n"
    "  /exit, /quit   end the session (so does Ctrl-D)\n"
    "  //text         send \"/text\" as a message\n"
    "Ctrl-C stops an answer (or the reading of a long message); at the prompt it discards the line.\n";

static const char *const chat_commands[] = {"help", "reset", "save", "load", "exit", "quit"};

/* "/save FILE": the argument after the command word, or NULL. */
static const char *argument(const char *line) {
    const char *p = line + strcspn(line, " \t");
    while (*p == ' ' || *p == '\t') p++;
    return *p ? p : NULL;
}

/* The count of messages, for the confirmations. */
static size_t n_messages(const Chat *c) { return json_array_size(c->msgs); }

/* A line starting with '/'. Returns 1 to end the session, else 0. */
static int command(Chat *c, const char *line) {
    char word[32];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(line + 1, " \t"), line + 1);
    const char *arg = argument(line);
    char msg[4200];
    if (!strcmp(word, "exit") || !strcmp(word, "quit")) return 1;
    if (!strcmp(word, "help")) {
        out(chat_help);
    } else if (!strcmp(word, "reset")) {
        restart(c);
        out("(a new conversation: the model has forgotten everything said so far)\n");
    } else if (!strcmp(word, "save") || !strcmp(word, "load")) {
        int save = word[0] == 's';
        if (!arg) {
            snprintf(msg, sizeof msg, "(/%s needs a file name: /%s FILE)\n", word, word);
            out(msg);
            return 0;
        }
        if (save ? chat_save(c, arg) : chat_load(c, arg)) {
            fflush(stdout);
            fprintf(stderr, "deltafin: %s: %s\n", word, df_errmsg());
            return 0;
        }
        snprintf(msg, sizeof msg, "(%s %zu message%s, %zu tokens of model state, %s %s)\n", save ? "saved" : "loaded",
                 n_messages(c), n_messages(c) == 1 ? "" : "s", c->s.held.n, save ? "to" : "from", arg);
        out(msg);
    } else {
        const char *near = cli_suggest(word, chat_commands, 6);
        snprintf(msg, sizeof msg, "(unknown command /%s%s%s%s; /help lists them, //text sends /text)\n", word,
                 near ? ": did you mean /" : "", near ? near : "", near ? "?" : "");
        out(msg);
    }
    return 0;
}

static void chat_loop(Chat *c, LineReader *in) {
    StrBuf line = {0};
    for (;;) {
        int r = line_reader_get(in, c->tty ? "\1\033[1m\1>\1\033[0m\1 " : "> ", &line);
        if (r == 0) break;
        if (r < 0) {
            out("\n");
            interrupt_clear();
            continue;
        }
        line_reader_remember(in, line.p);
        if (line.p[0] == '/' && line.p[1] != '/') {
            if (command(c, line.p)) break;
            continue;
        }
        if (!line.n) continue;
        if (turn(c, line.p[0] == '/' ? line.p + 1 : line.p)) {
            fprintf(stderr, "deltafin: %s (the conversation starts over)\n", df_errmsg());
            restart(c);
        }
    }
    sb_free(&line);
    out("\n");
}

int cmd_chat(Settings *set, int argc, char **argv) {
    const char *system = NULL, *load = NULL;
    Chat c;
    memset(&c, 0, sizeof c);
    int64_t max_new = -1;
    CliOpt opts[5 + SAMPLE_ARG_SPECS] = {
        CLI_STR("system", 0, &system, "TEXT", "a system message that opens the conversation"),
        CLI_FLAG("show-thinking", 0, &c.show_thinking,
                 "stream the model's thinking (hidden by default: a live count of its tokens instead)"),
        CLI_INT_ALIAS("max-new", 'n', &max_new, "N", "most tokens per answer (default DELTAFIN_ANSWER_TOKENS, 8192)", 1,
                      1 << 24, "n-predict"),
        CLI_FLAG("stats", 0, &c.stats, "print token counts and speed after each answer"),
        CLI_STR("load", 0, &load, "FILE", "continue a conversation saved with /save"),
    };
    SampleArgs sargs;
    sample_args_specs(&sargs, opts + 5);
    static const char about[] =
        "An interactive multi-turn chat. The model state is kept between turns: each turn reads only what is new, "
        "never the history again. On a terminal: line editing, a history kept across sessions "
        "($XDG_STATE_HOME/deltafin/chat_history), a pasted block of lines is one message, a status line shows the "
        "reading of the prompt and the thinking's progress. /help lists the commands (/reset, /save FILE, /load "
        "FILE, /exit). The thinking effort is --effort (DELTAFIN_REASONING_EFFORT); answers are greedy and exact unless a "
        "sampling option is given.";
    const CliCommand cmd = {"chat", "[options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    SampleParams sp;
    c.sampling = sample_args_finish(&cmd, &sargs, &sp, set->quiet ? NULL : stderr);
    c.limit_default = max_new < 0;
    c.max_new = max_new >= 0 ? max_new : set->answer_tokens > 0 ? set->answer_tokens : -1;
    c.repeat_stop = set->repeat_stop;
    term_init();
    EngineOptions eo = set->engine;
    if (c.sampling) eo.decoding = sample_params_label(&sp);
    c.e = cli_open_engine(set, &eo, stderr);
    if (!(c.tok = engine_tokenizer(c.e))) df_die("%s", df_errmsg());
    session_init(&c.s, c.e);
    EngineInfo info;
    engine_info(c.e, &info);
    if (c.sampling && sampler_init(&c.sampler, &sp, info.vocab)) df_die("%s", df_errmsg());
    c.xo = (XtmlOptions)XTML_OPTIONS_DEFAULT;
    c.xo.effort = set->effort;
    c.tty = isatty(STDOUT_FILENO);
    c.msgs = json_array();
    c.system = system;
    restart(&c);
    if (load && chat_load(&c, load)) df_die("chat: %s", df_errmsg());
    interrupt_install(0); /* Ctrl-C stops an answer, or the read at the prompt */
    int edit = c.tty && isatty(STDIN_FILENO);
    char history[4096];
    if (edit) setlocale(LC_CTYPE, ""); /* line editing reads and shows the terminal's characters */
    LineReader *in = line_reader_open(edit, edit && !settings_history_file(set, history, sizeof history) ? history : NULL,
                                      interrupt_pending);
    if (!set->quiet) fprintf(stderr, "deltafin chat: /help lists the commands; Ctrl-C stops an answer, Ctrl-D or /exit quits\n");
    if (load) printf("(loaded %zu messages, %zu tokens of model state, from %s)\n", n_messages(&c), c.s.held.n, load);
    chat_loop(&c, in);
    line_reader_close(in);
    json_decref(c.msgs);
    free(c.system_copy);
    tokids_free(&c.tail);
    tokids_free(&c.unanswered);
    session_free(&c.s);
    if (c.sampling) sampler_free(&c.sampler);
    tok_free(c.tok);
    if (engine_close(c.e)) df_die("%s", df_errmsg());
    return 0;
}

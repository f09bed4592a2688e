/* deltafin run - generate greedily from a prompt, printing as tokens are produced.
 *
 * The prompt is token ids (--tokens), raw text (--prompt) or, with --chat, a user message
 * rendered in K3's chat format. Output is ids, text (characters split across tokens are held
 * until complete), or in chat mode the answer on stdout and the thinking on stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/interrupt.h"
#include "cli/locate.h"
#include "cli/opts.h"
#include "cli/sample_args.h"
#include "cli/term.h"
#include "cli/token_list.h"
#include "engine/stats.h"
#include "text/utf8stream.h"
#include "text/xtml.h"
#include "util/err.h"
#include "util/fileio.h"

/* The largest prompt file -f reads: 64 MiB of text is millions of tokens, past any context. */
#define PROMPT_FILE_MAX ((size_t)64 << 20)

/* GenOptions.cancel: polled before every prefill chunk (where the prompt's progress is shown)
 * and every token. */
typedef struct {
    Session *s;
    size_t prompt;      /* the prompt's tokens */
    int decoding;       /* the first token was handed out: the prefill is over */
    PrefillMeter meter;
} Watch;

static int interrupted(void *ctx) {
    Watch *w = ctx;
    if (!w->decoding) {
        if (!w->meter.started) prefill_meter_start(&w->meter, w->s->reading, w->prompt);
        prefill_meter_show(&w->meter, w->s->reading);
    }
    return interrupt_pending();
}

typedef struct {
    Watch *watch;
    Tokenizer *tok;       /* NULL: print ids */
    XtmlParser *chat;     /* chat mode: split thinking from answer */
    Utf8Stream text;
    int first;
    int *ids;             /* --stats-json: every generated id (NULL: not kept) */
    int n_ids, cap_ids;
    ThinkingOut thinking; /* chat mode: the thinking on stderr */
    size_t calls_shown;   /* chat mode: tool calls printed so far */
} Printer;

static void put(FILE *f, const char *s, size_t n) { term_write(f, s, n); }

/* A chat delta: the thinking on stderr (ended before the answer), the answer on stdout, and any
 * tool call as soon as it is complete. */
static void put_delta(Printer *p, const XtmlDelta *d) {
    term_thinking(&p->thinking, d->reasoning, d->reasoning_len);
    if (d->content_len) term_thinking_end(&p->thinking);
    put(stdout, d->content, d->content_len);
    if (json_array_size(xtml_parser_tool_calls(p->chat)) > p->calls_shown) {
        term_thinking_end(&p->thinking);
        term_tool_calls(xtml_parser_tool_calls(p->chat), &p->calls_shown);
    }
}

static void keep_id(Printer *p, int tok) {
    if (p->n_ids == p->cap_ids) {
        p->cap_ids = p->cap_ids ? 2 * p->cap_ids : 256;
        p->ids = df_realloc(p->ids, sizeof *p->ids * (size_t)p->cap_ids);
    }
    p->ids[p->n_ids++] = tok;
}

static int print_token(void *ctx, int tok) {
    Printer *p = ctx;
    if (!p->watch->decoding) term_status_clear();
    p->watch->decoding = 1;
    if (p->cap_ids >= 0) keep_id(p, tok);
    if (!p->tok) {
        char id[16];
        put(stdout, id, (size_t)snprintf(id, sizeof id, p->first ? "%d" : " %d", tok));
        p->first = 0;
        return 0;
    }
    if (p->chat) {
        XtmlDelta d;
        if (xtml_parser_feed(p->chat, tok, &d)) return -1;
        put_delta(p, &d);
        return d.done;
    }
    size_t n, len;
    const uint8_t *bytes = tok_token_bytes(p->tok, tok, &n);
    const char *s = utf8stream_push(&p->text, bytes, n, &len);
    put(stdout, s, len);
    return 0;
}

static void finish_output(Printer *p) {
    size_t len;
    if (p->chat) {
        XtmlDelta d;
        xtml_parser_finish(p->chat, &d);
        put_delta(p, &d);
        term_thinking_end(&p->thinking);
    } else if (p->tok) {
        const char *rest = utf8stream_finish(&p->text, &len);
        put(stdout, rest, len);
    }
    if (!term_out_line_ended()) put(stdout, "\n", 1); /* and flushed: before anything on stderr */
}

/* Why the generation ended, when it is not what the user asked for: a cut answer, a full context. */
static void say_why_it_stopped(int max_context, const GenResult *res, int64_t max_new, int chat, int asked) {
    char of[64] = "";
    if (asked) snprintf(of, sizeof of, " of the %lld asked", (long long)max_new);
    if (res->hit_context)
        fprintf(stderr, "deltafin: stopped at the context limit of %d positions after %d tokens%s (raise it with "
                        "-c/--ctx-size or DELTAFIN_CONTEXT)\n",
                max_context, res->generated, of);
    else if (chat && !res->hit_stop && !res->interrupted && res->generated == max_new)
        fprintf(stderr, "deltafin: the answer was cut at %s%lld tokens before it ended\n",
                asked ? "-n/--max-new " : "", (long long)max_new);
}

/* The prompt's ids, from whichever of --tokens / --tokens-file / --prompt / --file / --chat was given
 * (text is the prompt's text, read from --file already). */
static int prompt_ids(Engine *e, Printer *p, const char *tokens, const char *tokens_file, const char *text, int chat,
                      int **ids) {
    EngineInfo info;
    engine_info(e, &info);
    if (tokens_file) return read_token_file(tokens_file, ids, info.vocab);
    if (tokens) {
        int max = (int)strlen(tokens) / 2 + 1;
        *ids = df_malloc(sizeof **ids * (size_t)max);
        return parse_token_list(tokens, *ids, max, info.vocab);
    }
    if (!chat) return engine_encode_text(e, p->tok, text, strlen(text), ids);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
    XtmlOptions opt = XTML_OPTIONS_DEFAULT;
    TokIds out = {0};
    int rc = msgs ? xtml_render(p->tok, msgs, &opt, &out) : df_fail("the prompt is not valid UTF-8");
    json_decref(msgs);
    if (rc) return tokids_free(&out), -1;
    *ids = df_malloc(sizeof **ids * (out.n ? out.n : 1));
    for (size_t i = 0; i < out.n; i++) (*ids)[i] = out.v[i];
    rc = (int)out.n;
    tokids_free(&out);
    return rc;
}

/* --stats-json FILE: the generation's numbers and ids for a program to read (bench). */
static void write_stats_json(Engine *e, const GenResult *res, const Printer *p, const char *path) {
    json_t *j = generate_stats_json(e, res, p->ids);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (!text || file_write_atomic(path, text, strlen(text))) df_die("run: cannot write --stats-json %s: %s", path, df_errmsg());
    free(text);
    json_decref(j);
}

int cmd_run(Settings *set, int argc, char **argv) {
    const char *tokens = NULL, *tokens_file = NULL, *text = NULL, *text_file = NULL, *stats_json = NULL, *positional = NULL;
    int n_pos = 0;
    int64_t max_new = -1, chunk = 0;
    int stats = 0, chat = 0;
    CliOpt opts[9 + SAMPLE_ARG_SPECS] = {
        CLI_STR("prompt", 'p', &text, "TEXT", "the prompt as text (output: text)"),
        CLI_STR("file", 'f', &text_file, "FILE", "the prompt as text, read from FILE (output: text)"),
        CLI_STR("tokens", 0, &tokens, "IDS", "the prompt as token ids, space-separated (output: ids)"),
        CLI_STR("tokens-file", 0, &tokens_file, "FILE", "the prompt as token ids read from FILE (output: ids)"),
        CLI_FLAG("chat", 0, &chat,
                 "render the prompt as a user message in K3's chat format: the answer on stdout, the thinking on "
                 "stderr; stops at <|end_of_msg|>"),
        CLI_INT_ALIAS("max-new", 'n', &max_new, "N",
                      "tokens to generate (default 256; with --chat until the answer ends or the context is full)", 0,
                      1 << 24, "n-predict"),
        CLI_INT("chunk", 0, &chunk, "N", "prompt positions per forward pass (default 0: the prefill window)", 0,
                MODEL_MAX_WINDOW),
        CLI_FLAG("stats", 0, &stats, "print speed and a per-phase breakdown"),
        CLI_STR("stats-json", 0, &stats_json, "FILE", "write the ids and the --stats numbers as JSON to FILE (for bench)"),
    };
    SampleArgs sargs;
    sample_args_specs(&sargs, opts + 9);
    static const char about[] =
        "Generates from a prompt, printing the text as it is produced; characters split across tokens are held "
        "until complete. Greedy and exact (fp32) unless a sampling option is given. On a terminal the prompt's "
        "reading shows its progress on stderr. It stops at -n/--max-new tokens, at the end of the answer (--chat) "
        "or at the context limit (-c/--ctx-size), and says so when that cuts the answer short. Ctrl-C stops cleanly "
        "keeping the text (twice: at once).";
    const CliCommand cmd = {"run", "[options] ([-p] TEXT | -f FILE | --tokens IDS | --tokens-file FILE)", about,
                            opts, CLI_N(opts), 1, "the prompt", 0};
    cli_parse(&cmd, set, argc, argv, &positional, &n_pos);
    if (positional && (text || text_file || tokens || tokens_file))
        cli_usage_error(&cmd, "the prompt is given twice ('%s' and an option)", positional);
    if (positional) text = positional;
    if (!!tokens + !!tokens_file + !!text + !!text_file != 1)
        cli_usage_error(&cmd, "give the prompt as an argument, or with exactly one of -p/--prompt, -f/--file, --tokens and --tokens-file");
    if (chat && !text && !text_file) cli_usage_error(&cmd, "--chat needs a text prompt (an argument, -p/--prompt or -f/--file)");
    char *file_text = NULL;
    if (text_file) {
        size_t len;
        if (file_read_all(text_file, PROMPT_FILE_MAX, &file_text, &len)) df_die("run: -f/--file: %s", df_errmsg());
        if (strlen(file_text) != len) df_die("run: -f/--file %s holds a NUL byte (not text)", text_file);
        text = file_text;
    }
    SampleParams sp;
    int sampling = sample_args_finish(&cmd, &sargs, &sp, set->quiet ? NULL : stderr);
    term_init();
    EngineOptions eo = set->engine;
    if (sampling) eo.decoding = sample_params_label(&sp);
    set->verbose |= stats; /* --stats: the full start-up line too */
    Engine *e = cli_open_engine(set, &eo, stderr);
    EngineInfo info;
    engine_info(e, &info);
    Session s;
    session_init(&s, e);
    s.chunk = (int)chunk;
    Watch watch = {.s = &s};
    Printer pr = {&watch, NULL, NULL, UTF8STREAM_INIT, 1, NULL, 0, stats_json ? 0 : -1, {0}, 0};
    if (text && !(pr.tok = engine_tokenizer(e))) df_die("%s", df_errmsg());
    if (chat) pr.chat = xtml_parser_new(pr.tok, 1);
    int *ids = NULL;
    int n = prompt_ids(e, &pr, tokens, tokens_file, text, chat, &ids);
    if (n < 0) df_die("%s", df_errmsg());
    if (n > info.max_context)
        df_die("run: the prompt's %d tokens exceed the context limit %d (-c/--ctx-size, DELTAFIN_CONTEXT)", n, info.max_context);
    int asked = max_new >= 0;
    if (max_new < 0) max_new = chat ? info.max_context : 256;
    watch.prompt = (size_t)n;
    interrupt_install(1); /* the first Ctrl-C stops before the next token, a second one exits */
    Sampler sampler;
    if (sampling && sampler_init(&sampler, &sp, info.vocab)) df_die("%s", df_errmsg());
    if (sampling) sampler_context(&sampler, ids, (size_t)n); /* the repetition penalty's window */
    GenOptions opt = {(int)max_new, chat ? info.eos_id : -1, interrupted, &watch, sampling ? &sampler : NULL};
    GenResult res;
    int rc = generate(&s, ids, (size_t)n, &opt, print_token, &pr, &res);
    term_status_clear();
    finish_output(&pr);
    if (res.interrupted) fprintf(stderr, "deltafin: interrupted after %d tokens\n", res.generated);
    if (rc) df_die("%s", df_errmsg());
    say_why_it_stopped(info.max_context, &res, max_new, chat, asked);
    if (stats) generate_print_stats(e, &res, stderr);
    if (stats_json) write_stats_json(e, &res, &pr, stats_json);
    session_free(&s);
    if (sampling) sampler_free(&sampler);
    free(ids);
    free(file_text);
    free(pr.ids);
    xtml_parser_free(pr.chat);
    utf8stream_free(&pr.text);
    tok_free(pr.tok);
    if (engine_close(e)) df_die("%s", df_errmsg());
    return res.interrupted ? 130 : 0;
}

/* deltafin run - generate greedily from a prompt, printing as tokens are produced.
 *
 * The prompt is token ids (--tokens), raw text (--prompt) or, with --chat, a user message
 * rendered in K3's chat format. Output is ids, text (characters split across tokens are held
 * until complete), or in chat mode the answer on stdout and the thinking on stderr. */
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
#include "cli/token_list.h"
#include "engine/stats.h"
#include "text/utf8stream.h"
#include "text/xtml.h"
#include "util/err.h"

/* The first SIGINT asks generation to stop before the next token (the text so far is kept); a
 * second one exits at once. */
static volatile sig_atomic_t interrupts;

static void on_sigint(int sig) {
    (void)sig;
    if (++interrupts >= 2) _exit(130);
}

static void install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

static int interrupted(void *ctx) {
    (void)ctx;
    return interrupts > 0;
}

typedef struct {
    Tokenizer *tok;       /* NULL: print ids */
    XtmlParser *chat;     /* chat mode: split thinking from answer */
    Utf8Stream text;
    int first;
    int *ids;             /* --stats-json: every generated id (NULL: not kept) */
    int n_ids, cap_ids;
} Printer;

static void put(FILE *f, const char *s, size_t n) {
    if (n) fwrite(s, 1, n, f), fflush(f);
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
    if (p->cap_ids >= 0) keep_id(p, tok);
    if (!p->tok) {
        printf(p->first ? "%d" : " %d", tok);
        p->first = 0;
        fflush(stdout);
        return 0;
    }
    if (p->chat) {
        XtmlDelta d;
        if (xtml_parser_feed(p->chat, tok, &d)) return -1;
        put(stderr, d.reasoning, d.reasoning_len);
        put(stdout, d.content, d.content_len);
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
        put(stderr, d.reasoning, d.reasoning_len);
        put(stdout, d.content, d.content_len);
    } else if (p->tok) {
        const char *rest = utf8stream_finish(&p->text, &len);
        put(stdout, rest, len);
    }
    printf("\n");
    fflush(stdout); /* before the statistics on stderr */
}

/* The prompt's ids, from whichever of --tokens / --prompt / --chat was given. */
static int prompt_ids(Engine *e, Printer *p, const char *tokens, const char *text, int chat, int **ids) {
    if (tokens) {
        int max = (int)strlen(tokens) / 2 + 1;
        *ids = df_malloc(sizeof **ids * (size_t)max);
        return parse_token_list(tokens, *ids, max, e->cat.cfg.vocab);
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
    if (!j || json_dump_file(j, path, JSON_COMPACT)) df_die("run: cannot write --stats-json %s", path);
    json_decref(j);
}

int cmd_run(const Settings *set, int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *text = NULL, *stats_json = NULL;
    int64_t max_new = -1, chunk = MODEL_MAX_CHUNK;
    int stats = 0, chat = 0;
    ArgSpec specs[8 + SAMPLE_ARG_SPECS] = {
        {"model", ARG_STR, &model, "checkpoint directory (default $DELTAFIN_ROOT or .)"},
        {"tokens", ARG_STR, &tokens, "prompt as token ids, space-separated (output: ids)"},
        {"prompt", ARG_STR, &text, "prompt text (output: text)"},
        {"chat", ARG_FLAG, &chat, "render --prompt as a user message in K3's chat format; stop at <|end_of_msg|>"},
        {"max-new", ARG_INT, &max_new, "tokens to generate (default 256 raw, the context limit with --chat)"},
        {"chunk", ARG_INT, &chunk, "prefill positions per pass (1..64, default 64)"},
        {"stats", ARG_FLAG, &stats, "print speed and a per-phase breakdown"},
        {"stats-json", ARG_STR, &stats_json, "write the ids and the --stats numbers as JSON to FILE (for bench)"},
    };
    SampleArgs sargs;
    sample_args_specs(&sargs, specs + 8);
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 8 + SAMPLE_ARG_SPECS, pos, 0, &n_pos,
                   "deltafin run --model DIR (--prompt TEXT [--chat] | --tokens IDS) [--temperature T ...]"))
        df_die("%s", df_errmsg());
    SampleParams sp;
    int sampling = sample_args_finish(&sargs, &sp, stderr);
    if (!tokens == !text) df_die("run: give the prompt with exactly one of --prompt and --tokens");
    if (chat && !text) df_die("run: --chat needs --prompt");
    if (max_new < -1 || max_new > (1 << 24)) df_die("run: --max-new must be 0..16777216");
    if (chunk < 1 || chunk > MODEL_MAX_CHUNK) df_die("run: --chunk must be 1..%d", MODEL_MAX_CHUNK);
    Engine e;
    if (engine_open(&e, settings_dir(set, model), &set->engine)) df_die("%s", df_errmsg());
    engine_print_settings(&e, stderr);
    Printer pr = {NULL, NULL, UTF8STREAM_INIT, 1, NULL, 0, stats_json ? 0 : -1};
    if (text && !(pr.tok = engine_tokenizer(&e))) df_die("%s", df_errmsg());
    if (chat) pr.chat = xtml_parser_new(pr.tok, 1);
    int *ids = NULL;
    int n = prompt_ids(&e, &pr, tokens, text, chat, &ids);
    if (n < 0) df_die("%s", df_errmsg());
    if (n > e.max_context) df_die("run: the prompt's %d tokens exceed the context limit %d (K3_CONTEXT)", n, e.max_context);
    if (max_new < 0) max_new = chat ? e.max_context : 256;
    install_sigint();
    Session s;
    session_init(&s, &e);
    s.chunk = (int)chunk;
    Sampler sampler;
    if (sampling && sampler_init(&sampler, &sp, e.cat.cfg.vocab)) df_die("%s", df_errmsg());
    GenOptions opt = {(int)max_new, chat ? e.cat.cfg.eos_id : -1, interrupted, NULL, sampling ? &sampler : NULL};
    GenResult res;
    int rc = generate(&s, ids, (size_t)n, &opt, print_token, &pr, &res);
    finish_output(&pr);
    if (res.interrupted) fprintf(stderr, "deltafin: interrupted after %d tokens\n", res.generated);
    if (rc) df_die("%s", df_errmsg());
    if (stats) generate_print_stats(&e, &res, stderr);
    if (stats_json) write_stats_json(&e, &res, &pr, stats_json);
    session_free(&s);
    if (sampling) sampler_free(&sampler);
    free(ids);
    free(pr.ids);
    xtml_parser_free(pr.chat);
    utf8stream_free(&pr.text);
    tok_free(pr.tok);
    engine_close(&e);
    return res.interrupted ? 130 : 0;
}

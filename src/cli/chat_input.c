/* chat_input.c - messages from a terminal through libedit, or lines from a pipe (chat_input.h). */
#include "cli/chat_input.h"

#include <errno.h>
#include <histedit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include "text/strbuf.h"
#include "util/err.h"
#include "util/fileio.h"

#define MAX_LINE (1 << 20)
#define HISTORY_SIZE 1000
#define PASTE_ON "\033[?2004h"
#define PASTE_OFF "\033[?2004l"

struct LineReader {
    EditLine *el;              /* NULL: plain lines */
    History *hist;
    char *history;             /* the history file, or NULL */
    int (*interrupted)(void);
    const char *prompt;
    mbstate_t mb;
};

/* EL_GETCFN: one character from the terminal. libedit's own reader retries a read that a signal
 * interrupted, so Ctrl-C would not reach the prompt; this one reports it (-1). */
static int get_char(EditLine *el, wchar_t *wc) {
    LineReader *r;
    el_get(el, EL_CLIENTDATA, &r);
    for (;;) {
        char b;
        ssize_t n = read(STDIN_FILENO, &b, 1);
        if (n < 0 && errno == EINTR) {
            if (r->interrupted()) return -1;
            continue;
        }
        if (n <= 0) return n < 0 ? -1 : 0;
        size_t k = mbrtowc(wc, &b, 1, &r->mb);
        if (k == (size_t)-2) continue;  /* more bytes of this character */
        if (k == (size_t)-1) {         /* not valid in this locale: the byte as it is */
            memset(&r->mb, 0, sizeof r->mb);
            *wc = (unsigned char)b;
        }
        return 1;
    }
}

static char *prompt_of(EditLine *el) {
    LineReader *r;
    el_get(el, EL_CLIENTDATA, &r);
    return (char *)r->prompt;
}

/* Bound to the start of a bracketed paste (ESC [ 200 ~): everything up to its end (ESC [ 201 ~)
 * goes into the line as typed text, line breaks included, so a pasted block is one message. */
static unsigned char on_paste(EditLine *el, int ch) {
    (void)ch;
    static const wchar_t end[] = L"\033[201~";
    const size_t n_end = sizeof end / sizeof end[0] - 1;
    size_t n = 0, cap = 256, matched = 0;
    wchar_t *text = df_malloc(sizeof *text * cap), c;
    int after_cr = 0;
    while (matched < n_end && n < MAX_LINE && el_wgetc(el, &c) == 1) {
        if (c == end[matched]) {
            matched++;
            continue;
        }
        for (size_t i = 0; i < matched + 1; i++) { /* what looked like the end, then c */
            wchar_t w = i < matched ? end[i] : c;
            if (w == L'\n' && after_cr) { /* CR LF: one line break */
                after_cr = 0;
                continue;
            }
            after_cr = w == L'\r';
            if (n + 2 > cap) text = df_realloc(text, sizeof *text * (cap *= 2));
            text[n++] = after_cr ? L'\n' : w; /* terminals send a pasted line break as Enter (CR) */
        }
        matched = 0;
    }
    text[n] = 0;
    if (n) el_winsertstr(el, text);
    free(text);
    return CC_REFRESH;
}

LineReader *line_reader_open(int edit, const char *history_file, int (*interrupted)(void)) {
    LineReader *r = df_calloc(1, sizeof *r);
    r->interrupted = interrupted;
    if (!edit) return r;
    r->el = el_init("deltafin", stdin, stdout, stderr);
    if (!r->el) return r; /* plain lines, then */
    r->hist = history_init();
    HistEvent ev;
    history(r->hist, &ev, H_SETSIZE, HISTORY_SIZE);
    history(r->hist, &ev, H_SETUNIQUE, 1);
    if (history_file) {
        r->history = df_strdup(history_file);
        char *slash = strrchr(r->history, '/');
        if (slash && slash != r->history) {
            *slash = 0;
            if (file_mkdirs(r->history)) fprintf(stderr, "deltafin: chat history: %s\n", df_errmsg());
            *slash = '/';
        }
        history(r->hist, &ev, H_LOAD, r->history); /* none yet is fine */
    }
    el_set(r->el, EL_CLIENTDATA, r);
    el_set(r->el, EL_EDITOR, "emacs");
    el_set(r->el, EL_HIST, history, r->hist);
    el_set(r->el, EL_GETCFN, get_char);
    el_set(r->el, EL_PROMPT_ESC, prompt_of, '\1');
    /* (the wide call: the narrow one copies the names and never frees the copies) */
    el_wset(r->el, EL_ADDFN, L"deltafin-paste", L"a bracketed paste, as one message", on_paste);
    el_set(r->el, EL_BIND, "\\e[200~", "deltafin-paste", NULL);
    el_source(r->el, NULL); /* the user's ~/.editrc, as other libedit programs read it */
    fputs(PASTE_ON, stdout);
    fflush(stdout);
    return r;
}

/* A line from a pipe or file, without its newline. */
static int plain_line(LineReader *r, StrBuf *line) {
    for (;;) {
        int c = getchar();
        if (c == EOF) {
            if (ferror(stdin) && errno == EINTR) {
                clearerr(stdin);
                if (r->interrupted()) return -1;
                continue;
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

int line_reader_get(LineReader *r, const char *prompt, StrBuf *line) {
    line->n = 0;
    sb_add(line, "", 0);
    if (!r->el) {
        fputs(prompt, stdout);
        fflush(stdout);
        return plain_line(r, line);
    }
    r->prompt = prompt;
    int count = 0;
    const char *got = el_gets(r->el, &count);
    if (!got) {
        if (count < 0 && r->interrupted()) { /* Ctrl-C: the line is dropped */
            el_reset(r->el);
            return -1;
        }
        return 0;
    }
    size_t n = strlen(got);
    while (n && (got[n - 1] == '\n' || got[n - 1] == '\r')) n--;
    sb_add(line, got, n < MAX_LINE ? n : MAX_LINE);
    return 1;
}

void line_reader_remember(LineReader *r, const char *line) {
    if (!r->hist || !*line) return;
    HistEvent ev;
    history(r->hist, &ev, H_ENTER, line);
    if (r->history && history(r->hist, &ev, H_SAVE, r->history) < 0)
        fprintf(stderr, "deltafin: cannot save the chat history in %s\n", r->history);
}

void line_reader_close(LineReader *r) {
    if (!r) return;
    if (r->el) {
        fputs(PASTE_OFF, stdout);
        fflush(stdout);
        el_end(r->el);
    }
    if (r->hist) history_end(r->hist);
    free(r->history);
    free(r);
}

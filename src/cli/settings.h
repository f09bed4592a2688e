/* settings.h - every setting deltafin reads, parsed and validated once, in one place.
 *
 * The table (settings.c) knows each setting's name, kind, default, valid values and help text.
 * main() fills a Settings from the environment before any command runs: a bad value stops the
 * program with one line naming the variable, whatever the command, even when the value matters
 * only in another mode (a streaming setting with the mapped store). The library never sees the
 * environment: commands hand it the plain values or the options structs below (EngineOptions with
 * its StoreOptions and FetchOptions; ServeConfig's fields).
 *
 * Command-line flags are a second source for the same rows: every row has a flag (--threads for
 * K3_THREADS; a few have a short form, -t), which the option parser (cli/opts.h) gives every
 * command. settings_set takes a value and the name of where it came from ("K3_THREADS", or
 * "--threads"), validates it exactly as for the environment, names that origin in its message
 * and remembers it; main() reads the environment first, so a flag overrides its variable. Only
 * the CLI includes this header.
 *
 * Names: every variable is DELTAFIN_NAME. The rows still carry the older K3_NAME spelling as
 * their `name` where they had one (so that the table reads as before): settings_var gives the
 * variable's name, and the older one is read too, as an alias (set both to different values and
 * deltafin refuses to guess). Other programs' variables keep their names (HF_TOKEN, TMPDIR,
 * XDG_*). */
#ifndef DF_SETTINGS_H
#define DF_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

#define SETTINGS_MAX 64 /* rows the table may have (a static check in settings.c) */

typedef struct {
    const char *root;         /* DELTAFIN_ROOT (or -m/--model): the model directory; NULL: not given
                               * (cli/locate.h then looks for the default install and the bundled model) */
    EngineOptions engine;     /* K3_* of the engine, its store and its on-demand fetch */
    const char *api_key;      /* DELTAFIN_API_KEY, or NULL */
    int64_t server_max_tokens; /* K3_SERVER_MAX_TOKENS; -1: no ceiling */
    int memo_entries;         /* K3_RESPONSE_MEMO_ENTRIES */
    int prompt_snapshot;      /* K3_PROMPT_SNAPSHOT */
    const char *prompt_cache; /* DELTAFIN_PROMPT_CACHE: a folder, "off", or NULL for the default one */
    uint64_t prompt_cache_bytes; /* DELTAFIN_PROMPT_CACHE_GB */
    int64_t answer_tokens;    /* DELTAFIN_ANSWER_TOKENS: a chat answer's default limit; 0: none */
    int repeat_stop;          /* DELTAFIN_REPEAT_STOP */
    const char *effort;       /* K3_REASONING_EFFORT, or NULL: the chat format's default (max) */
    const char *tmpdir;       /* TMPDIR: where bench keeps its children's files */
    const char *cache_home;   /* XDG_CACHE_HOME, or NULL: $HOME/.cache */
    const char *state_home;   /* XDG_STATE_HOME, or NULL: $HOME/.local/state */
    const char *home;         /* HOME (or the password database's entry): not a setting, the base of
                               * the two above; NULL when neither knows one */
    int quiet;                /* DELTAFIN_QUIET (-q): no start-up line and no notes, only output and errors */
    int verbose;              /* DELTAFIN_VERBOSE: the full start-up line (every resolved setting) */
    const char *origin[SETTINGS_MAX]; /* per table row: the variable or flag its value came from,
                                       * NULL while it has its default */
} Settings;

typedef enum {
    SET_INT,    /* int in [lo, hi] */
    SET_INT64,  /* int64_t in [lo, hi] */
    SET_BOOL,   /* int: 0 or 1 */
    SET_CHOICE, /* an enum (int-sized): one of choices */
    SET_GB,     /* uint64_t bytes from decimal GB in [lo / 100, hi] */
    SET_TEXT,   /* const char *, checked by `check` when it has one */
} SettingKind;

typedef struct {
    const char *name;
    int value;
} SettingChoice;

typedef struct {
    const char *name;         /* the environment variable: its older K3_ spelling where it had one
                               * (settings_var: the DELTAFIN_ name), else its name */
    const char *flag;         /* its command-line option, without "--"; NULL: environment only */
    char short_flag;          /* its one-letter option (-t), or 0 */
    const char *alias;        /* an older spelling of the flag that is still accepted, or NULL */
    const char *arg;          /* what a value looks like in help ("DIR"); NULL: from the kind */
    SettingKind kind;
    size_t offset;            /* of the field in Settings */
    long long lo, hi;         /* SET_INT, SET_INT64, SET_GB */
    const SettingChoice *choices; /* SET_CHOICE: ends with a NULL name */
    int (*check)(const char *value, const char **stored); /* SET_TEXT: validates, may map the value
                                                           * (K3_TRACE=1 -> a file name); NULL: any */
    const char *what;         /* what a value is, for messages: "a thread count" */
    const char *def;          /* the default as a value of this setting; NULL: none */
    const char *def_text;     /* the default in words when def is NULL ("all cores") */
    long long unset;          /* a numeric row's value without a default (the library's "decide
                               * yourself": 0, or -1 where 0 is a valid value; a SET_GB row's -1
                               * is UINT64_MAX bytes) */
    int secret;               /* never printed (keys, tokens) */
    int nonempty;             /* set but empty is an error, not the default (a key that would
                               * otherwise silently turn authentication off) */
    const char *help;
} Setting;

/* The table, in the README's order; *n gets its length. */
const Setting *settings_table(size_t *n);
/* The variable's name (DELTAFIN_THREADS for the row K3_THREADS); its older name, or NULL. */
const char *settings_var(const Setting *row);
const char *settings_old_var(const Setting *row);
/* The row of a variable name (either spelling; name[0..n)), or NULL. */
const Setting *settings_find(const char *name);
const Setting *settings_find_n(const char *name, size_t n);
/* The row of a flag name (without "--"; its alias too), or NULL. */
const Setting *settings_find_flag(const char *flag);

/* Every setting at its default. */
void settings_defaults(Settings *s);
/* Defaults, then every variable that is set and not empty (set and empty is refused for the
 * rows marked nonempty). Returns 0, or -1 with a message naming the first bad one. */
int settings_from_env(Settings *s);
/* Parses value for row into s. origin names the source in the message ("K3_THREADS",
 * "--threads") and is remembered in s->origin (borrowed); an empty value means the default.
 * Returns 0, or -1 with a message. */
int settings_set(Settings *s, const Setting *row, const char *value, const char *origin);
/* Where row's value came from: the variable or flag, or NULL for the default. */
const char *settings_origin(const Settings *s, const Setting *row);
/* The current value of row as the environment would spell it ("" for an unset text). */
void settings_value_text(const Settings *s, const Setting *row, char *buf, size_t n);

/* The default install directory: $XDG_CACHE_HOME/deltafin, else $HOME/.cache/deltafin. Returns
 * 0, or -1 with a message when neither variable (nor the password database) gives a home. */
int settings_default_root(const Settings *s, char *buf, size_t n);
/* Where chat keeps its line history: $XDG_STATE_HOME/deltafin/chat_history, else
 * $HOME/.local/state/deltafin/chat_history. Returns 0, or -1 as above. */
int settings_history_file(const Settings *s, char *buf, size_t n);

/* The prompt cache's folder (DELTAFIN_PROMPT_CACHE, else $XDG_CACHE_HOME/deltafin-prompt-cache,
 * else $HOME/.cache/deltafin-prompt-cache), or "" when it is off. Returns 0, or -1 as above. */
int settings_prompt_cache_dir(const Settings *s, char *buf, size_t n);

/* `deltafin settings`: every setting with its value now, its default and what it does. */
void settings_print(const Settings *s, FILE *f);

#endif

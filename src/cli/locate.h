/* locate.h - which model directory a command works on, the same way for every command.
 *
 * In order: -m/--model DIR (or its older spelling --root), else DELTAFIN_ROOT, else the default
 * install ($XDG_CACHE_HOME/deltafin, else ~/.cache/deltafin: where `deltafin setup` installs),
 * else, for commands that only read a model, the bundled one: models/k3-mini beside the build
 * directory (build/deltafin -> ../models/k3-mini, found through /proc/self/exe) or, after `make
 * install`, PREFIX/share/deltafin/models/k3-mini. A path to a model's config.json means its
 * directory. When nothing is found the error says where it looked and what to run. */
#ifndef DF_LOCATE_H
#define DF_LOCATE_H

#include <stddef.h>

#include "cli/settings.h"
#include "engine/engine.h"

typedef enum {
    MODEL_READ,    /* a model to compute with or read (run, chat, serve, logits, nll, tokenize, ...) */
    MODEL_TOKENIZER, /* only the tokenizer (tokenize, detokenize): a given directory needs tiktoken.model,
                      * not config.json */
    MODEL_INSTALL, /* an install to make or change (setup, fetch, warm, doctor, convert-spine): never the
                    * bundled model; the default install location even when nothing is there yet */
} ModelUse;

typedef struct {
    char dir[4096];
    char note[4400];  /* how it was found when that is worth saying on the start-up line (the bundled
                       * model, a config.json path), else "" */
    int bundled;
} ModelDir;

/* Fills m. Returns 0, or -1 with a one-line message. */
int locate_model(const Settings *s, ModelUse use, ModelDir *m);
/* The bundled model's directory when this binary can see one (0), else -1 with the places it
 * looked in `looked` (may be NULL). */
int locate_bundled(char *dir, size_t n, char *looked, size_t looked_n);

/* locate_model, or the end of the command with its message. */
void cli_model_dir(const Settings *s, ModelUse use, ModelDir *m);
/* The install directory (MODEL_INSTALL), or the end of the command; valid until the next call. */
const char *cli_install_dir(const Settings *s);
/* Locates the model to read (MODEL_READ), opens it with o (its model_note set to how it was
 * found) and, when startup is not NULL, prints the start-up line there: the short one, the full
 * one with --verbose, none with -q/--quiet. Returns the Engine (engine_close frees it); exits on an
 * error. */
Engine *cli_open_engine(const Settings *s, const EngineOptions *o, FILE *startup);

#endif

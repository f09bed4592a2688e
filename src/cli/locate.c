/* locate.c - finding the model directory (locate.h). */
#include "cli/locate.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/die.h"
#include "util/err.h"
#include "util/platform.h"

#define BUNDLED "k3-mini"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int has_file(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return is_file(p);
}

static int has_config(const char *dir) { return has_file(dir, "config.json"); }

static int copy_path(char *dst, size_t n, const char *src) {
    if (snprintf(dst, n, "%s", src) >= (int)n) return df_fail("%.80s...: the path is too long", src);
    return 0;
}

/* The directory part of path (without a trailing slash), "." when it has none. */
static void parent_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == path) snprintf(out, n, "/");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int locate_bundled(char *dir, size_t n, char *looked, size_t looked_n) {
    char exe[PATH_MAX], bin[PATH_MAX], top[PATH_MAX];
    if (looked && looked_n) looked[0] = 0;
    if (plat_exe_path(exe, sizeof exe) != 0) {
        if (looked) snprintf(looked, looked_n, "(cannot tell where this program is: %s)", strerror(errno));
        return -1;
    }
    parent_of(exe, bin, sizeof bin); /* build/ or PREFIX/bin */
    parent_of(bin, top, sizeof top); /* the source tree or PREFIX */
    static const char *const places[] = {"%s/models/" BUNDLED, "%s/share/deltafin/models/" BUNDLED};
    for (int i = 0; i < 2; i++) {
        char cand[PATH_MAX + 64];
        snprintf(cand, sizeof cand, places[i], strcmp(top, "/") ? top : "");
        if (has_config(cand)) return copy_path(dir, n, cand);
        if (looked) {
            size_t at = strlen(looked);
            snprintf(looked + at, looked_n - at, "%s%s", at ? " or " : "", cand);
        }
    }
    return -1;
}

/* A given path: a directory, or a model's config.json (its directory). */
static int given_dir(const char *path, const char *origin, ModelUse use, ModelDir *m) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (is_file(path)) {
        if (strcmp(base, "config.json"))
            return df_fail("%s (%s) is a file: give the model's directory, the one holding config.json and the "
                           "shards", path, origin);
        parent_of(path, m->dir, sizeof m->dir);
        snprintf(m->note, sizeof m->note, "the directory of %s", path);
        return 0;
    }
    if (copy_path(m->dir, sizeof m->dir, path)) return -1;
    if (use == MODEL_INSTALL) return 0; /* setup makes it; the install commands say what is missing */
    if (!is_dir(path)) return df_fail("%s (%s): no such directory", path, origin);
    const char *need = use == MODEL_TOKENIZER ? "tiktoken.model" : "config.json";
    if (!has_file(path, need))
        return df_fail("%s (%s) has no %s: not a model directory (deltafin setup installs K3; deltafin synth "
                       "writes a random-weight model)", path, origin, need);
    return 0;
}

int locate_model(const Settings *s, ModelUse use, ModelDir *m) {
    memset(m, 0, sizeof *m);
    if (s->root && *s->root) {
        const char *origin = settings_origin(s, settings_find("DELTAFIN_ROOT"));
        return given_dir(s->root, origin ? origin : "DELTAFIN_ROOT", use, m);
    }
    char root[4096];
    if (settings_default_root(s, root, sizeof root)) return -1;
    if (use == MODEL_INSTALL || has_config(root)) return copy_path(m->dir, sizeof m->dir, root);
    char looked[2 * PATH_MAX + 160];
    if (locate_bundled(m->dir, sizeof m->dir, looked, sizeof looked) == 0) {
        m->bundled = 1;
        snprintf(m->note, sizeof m->note, "the bundled %s: no -m/--model or DELTAFIN_ROOT, nothing installed in %s",
                 BUNDLED, root);
        return 0;
    }
    return df_fail("no model: none given with -m/--model DIR or DELTAFIN_ROOT, nothing installed in %s, no bundled "
                   "model at %s; run `deltafin setup` to install K3 there, give -m DIR, or make a random-weight "
                   "one with `deltafin synth --preset small --out DIR`",
                   root, looked);
}

void cli_model_dir(const Settings *s, ModelUse use, ModelDir *m) {
    if (locate_model(s, use, m)) df_die("%s", df_errmsg());
}

const char *cli_install_dir(const Settings *s) {
    static ModelDir m;
    cli_model_dir(s, MODEL_INSTALL, &m);
    return m.dir;
}

Engine *cli_open_engine(const Settings *s, const EngineOptions *o, FILE *startup) {
    static ModelDir m; /* the engine borrows the note for its lifetime */
    cli_model_dir(s, MODEL_READ, &m);
    EngineOptions with = *o;
    with.model_note = m.note[0] ? m.note : NULL;
    Engine *e = engine_open(m.dir, &with);
    if (!e) df_die("%s", df_errmsg());
    if (s->quiet) return e;
    if (startup && s->verbose) engine_print_settings(e, startup);
    else if (startup) engine_print_summary(e, startup);
    else if (m.bundled) fprintf(stderr, "deltafin: model %s [%s]\n", m.dir, m.note);
    return e;
}

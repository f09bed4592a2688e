/* model_fixture.h - a tiny synth checkpoint in a temporary directory, opened as an Engine with
 * the program's default settings and weights mapped, for the unit tests that need a real model
 * (speculation, sessions). They may read the Engine's fields (engine_internal.h). */
#ifndef DF_MODEL_FIXTURE_H
#define DF_MODEL_FIXTURE_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/settings.h"
#include "engine/engine_internal.h" /* the unit tests look inside the Engine */
#include "synth/synth.h"
#include "util/err.h"

static int fixture_remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The settings' defaults, with the mapped store and a fixed prefill window (an automatic one follows
 * the memory budget, which tests that derive budgets from a plan must not move). */
static EngineOptions fixture_options(void) {
    Settings s;
    settings_defaults(&s);
    s.engine.store.kind = STORE_MAPPED;
    s.engine.window = MODEL_BATCH_ROWS;
    return s.engine;
}

/* dir: a mkdtemp template, filled in. Returns the Engine, or NULL after printing why. */
static Engine *fixture_open(char *dir, uint64_t seed) {
    SynthPreset p;
    SynthOptions so = {0};
    if (!mkdtemp(dir)) return perror("mkdtemp"), NULL;
    EngineOptions o = fixture_options();
    Engine *e = NULL;
    if (synth_preset(&p, "tiny", &so) || synth_write(&p, seed, dir, 0) || !(e = engine_open(dir, &o))) {
        fprintf(stderr, "setup: %s\n", df_errmsg());
        return NULL;
    }
    return e;
}

static void fixture_close(Engine *e, const char *dir) {
    engine_close(e);
    nftw(dir, fixture_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

#endif

/* The schema's tensor table: every SchemaTensor has a name, no two share one, the model's own
 * tensors sit outside the layers, and every entry the schema lists for a preset's layers and
 * globals is the tensor its id names (the engine binds its weights by id, synth and the catalog
 * list them by entry: both must agree). */
#include "check.h"
#include "format/schema.h"
#include "synth/synth.h"

/* Every tensor name ends in one of these (a table entry left out would print as "(null)"). */
static int known_ending(const char *name) {
    static const char *const endings[] = {".weight", ".A_log", ".dt_bias", ".e_score_correction_bias"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof endings / sizeof endings[0]; i++) {
        size_t m = strlen(endings[i]);
        if (n > m && !strcmp(name + n - m, endings[i])) return 1;
    }
    return 0;
}

static void every_tensor_has_one_name_of_its_own(void) {
    char a[SCHEMA_NAME_MAX], b[SCHEMA_NAME_MAX];
    for (int t = 0; t < TENSOR_COUNT; t++) {
        schema_tensor_name(a, (SchemaTensor)t, 3);
        CHECK_MSG(known_ending(a), "tensor %d has no name of a tensor: %s", t, a);
        int layered = !strncmp(a, SCHEMA_PREFIX "model.layers.3.", strlen(SCHEMA_PREFIX "model.layers.3."));
        CHECK_MSG(layered == (t < TENSOR_EMBED), "tensor %d: %s", t, a);
        for (int u = 0; u < t; u++) {
            schema_tensor_name(b, (SchemaTensor)u, 3);
            CHECK_MSG(strcmp(a, b) != 0, "tensors %d and %d are both %s", u, t, a);
        }
    }
}

static void listed_entries_are_their_ids(const char *preset) {
    SynthPreset p;
    SynthOptions so = {.size_gb = 0.1};
    CHECK(synth_preset(&p, preset, &so) == 0);
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    char name[SCHEMA_NAME_MAX];
    int n = schema_globals(&p.cfg, e);
    for (int l = -1; l < p.cfg.n_layers; l++) {
        if (l >= 0) n = schema_layer(&p.cfg, l, e);
        for (int i = 0; i < n; i++) {
            CHECK(e[i].tensor >= 0 && e[i].tensor < TENSOR_COUNT);
            schema_tensor_name(name, e[i].tensor, l);
            CHECK_MSG(!strcmp(name, e[i].name), "%s: layer %d lists %s as %s", preset, l, e[i].name, name);
        }
    }
    schema_expert(&p.cfg, 1, 0, e);
    for (int i = 0; i < 6; i++) CHECK(e[i].tensor == TENSOR_EXPERT);
}

static void entries_of_every_preset(void) {
    listed_entries_are_their_ids("tiny");
    listed_entries_are_their_ids("small");
    listed_entries_are_their_ids("big");
}

int main(void) {
    RUN(every_tensor_has_one_name_of_its_own);
    RUN(entries_of_every_preset);
    return check_summary();
}

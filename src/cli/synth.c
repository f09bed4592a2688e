/* deltafin synth - write a random-weight checkpoint in the exact K3 layout. */
#include <stdio.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "synth/synth.h"
#include "util/err.h"

int cmd_synth(const Settings *set, int argc, char **argv) {
    (void)set; /* reads no setting */
    const char *preset = NULL, *out = NULL;
    int64_t seed = 1, layers = 0;
    double size_gb = 0, embed_scale = 1;
    int quiet = 0;
    ArgSpec specs[] = {
        {"preset", ARG_STR, &preset, "tiny | small | big | k3"},
        {"out", ARG_STR, &out, "output directory"},
        {"seed", ARG_INT, &seed, "random seed (default 1); same seed, byte-identical files"},
        {"size-gb", ARG_DOUBLE, &size_gb, "big: total size in GB"},
        {"layers", ARG_INT, &layers, "number of layers (k3: default 2)"},
        {"embed-scale", ARG_DOUBLE, &embed_scale,
         "multiply the embedding by X (0.001..10000, default 1); a large X such as 1024 "
         "makes greedy output fall into loops, for measuring speculation"},
        {"quiet", ARG_FLAG, &quiet, "no progress lines"},
    };
    const char *pos[1];
    int n_pos;
    if (args_parse(argc, argv, specs, 7, pos, 0, &n_pos, "deltafin synth --preset NAME --out DIR [--seed S]"))
        df_die("%s", df_errmsg());
    if (!preset || !out) df_die("synth: --preset and --out are required");
    if (seed < 0) df_die("synth: --seed must be non-negative");
    SynthPreset p;
    SynthOptions opt = {size_gb, (int)layers};
    if (synth_preset(&p, preset, &opt) || synth_set_embed_scale(&p, embed_scale) ||
        synth_write(&p, (uint64_t)seed, out, !quiet))
        df_die("%s", df_errmsg());
    printf("wrote %s checkpoint to %s (%d layers, %d experts/layer)\n", preset, out, p.cfg.n_layers, p.cfg.n_experts);
    return 0;
}

/* deltafin synth - write a random-weight checkpoint in the exact K3 layout. */
#include <stdio.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/die.h"
#include "cli/opts.h"
#include "synth/synth.h"
#include "util/err.h"
#include "util/fileio.h"

int cmd_synth(Settings *set, int argc, char **argv) {
    const char *preset = NULL, *out = NULL;
    int64_t seed = 1, layers = 0;
    double size_gb = 0, embed_scale = 1;
    int force = 0;
    const CliOpt opts[] = {
        CLI_STR("preset", 0, &preset, "NAME", "tiny | small | big | k3"),
        CLI_STR("out", 'o', &out, "DIR", "the directory to write"),
        CLI_INT("seed", 0, &seed, "S", "random seed (default 1); the same seed writes byte-identical files", 0, INT64_MAX),
        CLI_DOUBLE("size-gb", 0, &size_gb, "X", "big: the total size in GB"),
        CLI_INT("layers", 0, &layers, "N", "number of layers (k3: default 2)", 0, 1 << 20),
        CLI_DOUBLE("embed-scale", 0, &embed_scale, "X",
         "multiply the embedding by X (0.001..10000, default 1); a large X such as 1024 makes greedy output fall "
         "into loops, for measuring speculation"),
        CLI_FLAG("force", 0, &force, "write into a directory that is not empty (files of the same names are replaced)"),
    };
    static const char about[] =
        "Writes a random-weight checkpoint in the exact K3 file layout (shards, index, config, tokenizer): tiny for "
        "tests, big for models larger than RAM, k3 for full-width layers. The text such a model writes is "
        "meaningless; the bundled k3-mini is a trained one. A directory that is not empty (an install, another "
        "model) is refused unless --force.";
    const CliCommand cmd = {"synth", "--preset NAME --out DIR [options]", about, opts, CLI_N(opts), 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    if (!preset || !out) cli_usage_error(&cmd, "--preset and --out are required");
    int exists;
    char first[256];
    if (file_dir_peek(out, &exists, first, sizeof first)) df_die("synth: %s", df_errmsg());
    if (*first && !force)
        df_die("synth: %s is not empty (it holds %s): give a new or empty directory, or --force to replace the "
               "model files there", out, first);
    SynthPreset p;
    SynthOptions opt = {size_gb, (int)layers};
    if (synth_preset(&p, preset, &opt) || synth_set_embed_scale(&p, embed_scale) ||
        synth_write(&p, (uint64_t)seed, out, !set->quiet))
        df_die("%s", df_errmsg());
    if (!set->quiet) printf("wrote %s checkpoint to %s (%d layers, %d experts/layer)\n", preset, out, p.cfg.n_layers, p.cfg.n_experts);
    return 0;
}

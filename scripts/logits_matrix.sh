#!/usr/bin/env bash
# Writes the logits of fixed token sequences for a matrix of models and settings, one file per
# case, so that two builds can be compared bit for bit: a change that must not move a single bit
# (a refactor of the forward pass, a new kernel) runs this with the old and the new binary and
# compares the folders with `cmp` (scripts/logits_matrix.sh --compare A B).
#
#   scripts/logits_matrix.sh BIN OUTDIR [MODELS_DIR]   write OUTDIR/CASE.f32 for every case
#   scripts/logits_matrix.sh --compare DIR_A DIR_B     cmp every case; exit 1 on any difference
#
# MODELS_DIR (default: OUTDIR/../models) caches the synth models between runs. The cases: the
# bundled k3-mini and synth tiny, small and big (0.1 GB, streamed under a small budget) models;
# chunk sizes 1, 7, 64 and the default; 1 and 2 threads; the latent and the expanded MLA cache; a mapped and a
# streamed store; and generated text (speculation on and off, a batch of sequences is covered by
# the unit tests).
set -euo pipefail

if [ "${1:-}" = --compare ]; then
    a=$2 b=$3 bad=0 n=0
    for f in "$a"/*.f32 "$a"/*.txt; do
        [ -e "$f" ] || continue
        n=$((n + 1))
        if ! cmp -s "$f" "$b/$(basename "$f")"; then echo "DIFFERS: $(basename "$f")"; bad=1; fi
    done
    echo "compared $n cases: $([ $bad = 0 ] && echo 'all bit-identical' || echo 'some differ')"
    exit $bad
fi

bin=$(realpath "$1") out=$2
models=${3:-$out/../models}
mkdir -p "$out" "$models"
[ -f "$models/tiny/config.json" ] || "$bin" synth --preset tiny -o "$models/tiny" -q
[ -f "$models/small/config.json" ] || "$bin" synth --preset small -o "$models/small" -q
[ -f "$models/big/config.json" ] || "$bin" synth --preset big --size-gb 0.1 -o "$models/big" -q
here=$(cd "$(dirname "$0")/.." && pwd)

tokens="5 17 300 42 42 7 100 3 9 12 60 77 1 2 3 88 21 4 250 11 8 6 40 2 33 44 55 66 77 88 99 111 122 133 144 155"
run_case() { # name model [env ...] -- [logits options ...]
    local name=$1 model=$2
    shift 2
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$bin" logits -m "$model" --tokens "$tokens" -o "$out/$name.f32" "$@" >/dev/null 2>"$out/$name.err" ||
        { echo "case $name failed:"; cat "$out/$name.err"; exit 1; }
}

for m in k3mini tiny small big; do
    dir="$models/$m"
    [ $m = k3mini ] && dir="$here/models/k3-mini"
    for chunk in 1 7 64; do
        for t in 1 2; do
            run_case "$m-c$chunk-t$t" "$dir" K3_THREADS=$t -- --chunk $chunk
        done
    done
    run_case "$m-default" "$dir" -- # the default chunking (the prefill window, where there is one)
    run_case "$m-expanded-c7" "$dir" K3_MLA_CACHE=expanded -- --chunk 7
    run_case "$m-stream-c7" "$dir" K3_STORE=stream K3_CONTEXT=1024 K3_RAM_GB=0.3 -- --chunk 7
done
run_case "big-stream-tight-c64" "$models/big" K3_STORE=stream K3_CONTEXT=1024 K3_RAM_GB=0.22 -- --chunk 64

# generated text: greedy with and without speculation (verify passes and their commits)
for m in k3mini tiny; do
    dir="$models/$m"
    [ $m = k3mini ] && dir="$here/models/k3-mini"
    for spec in 0 1; do
        "$bin" run -m "$dir" -p "The capital of France is" -n 40 \
            $([ $spec = 1 ] && echo --spec || echo --no-spec) >"$out/$m-run-spec$spec.txt" 2>/dev/null ||
            { echo "run $m spec=$spec failed"; exit 1; }
    done
done
echo "wrote $(ls "$out"/*.f32 | wc -l) logits files and $(ls "$out"/*.txt | wc -l) texts to $out"

#!/usr/bin/env bash
# Prefill chunking and router lookahead measured side by side in one run, on a synth model
# streamed under a budget smaller than the model (K3_STORE=stream, K3_RAM_GB). Speculation has its
# own: bench/bench_spec.sh.
#
#   bench/bench_speed.sh [model_gb] [budget_gb] [prompt_tokens] [new_tokens]   (defaults: 6 2 128 48)
#
# Writes a `synth --preset big` model under $BENCH_DIR (default /tmp/deltafin-bench; removed at the
# end unless KEEP=1). Every row is one fresh process (empty expert cache; reads are O_DIRECT, so
# no page cache carries over between rows). Prints one line per row from `run --stats`.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-6}" budget="${2:-2}" n_prompt="${3:-128}" new="${4:-48}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df="$PWD/build/deltafin"
model="$dir/big$size"
mkdir -p "$dir"
[ -f "$model/config.json" ] || "$df" synth --preset big --size-gb "$size" --seed 5 --out "$model" --quiet
ordinary=$(awk -v n="$n_prompt" 'BEGIN { srand(1); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * 999) }')
echo "model $(du -s --block-size=1 "$model" | awk '{printf "%.2f GB", $1 / 1e9}'), budget K3_RAM_GB=$budget, $(nproc) cores"

row() { # label, prompt, max-new, chunk, env...
    local label="$1" prompt="$2" max_new="$3" chunk="$4"; shift 4
    local err
    err=$(env K3_STORE=stream K3_RAM_GB="$budget" K3_PROFILE=1 "$@" "$df" run --model "$model" --tokens "$prompt" \
        --max-new "$max_new" --chunk "$chunk" --stats 2>&1 >/dev/null)
    printf '%s\n' "== $label ($*)"
    printf '%s\n' "$err" | grep -E '^stats:' | sed 's/^/   /'
    # decode forwards only (one new position each; verify passes count as one forward)
    printf '%s\n' "$err" | awk '/^profile: pos [0-9]+ \+[0-9]:/ && !first++ { next }
        /^profile: pos [0-9]+ \+[0-9]:/ { n++; t += $5; for (i = 1; i <= NF; i++) if ($i == "experts" && $(i+1) ~ /^[0-9.]+$/ && $(i+2) == "s") w += $(i+1) }
        END { if (n) printf "   decode forwards: %d, %.4f s each, expert wait %.4f s each\n", n, t / n, w / n }'
}

short=$(echo "$ordinary" | cut -d' ' -f1-8)
# 1. prefill: one position per forward vs 64 (bytes read per prompt token in the last stats line)
row "prefill, chunk 1" "$ordinary" 1 1 K3_LOOKAHEAD=0
row "prefill, chunk 64" "$ordinary" 1 64 K3_LOOKAHEAD=0
# 2. decode (8-token prompt) with router lookahead off and on (speculation off to isolate it)
for run in 1 2; do # twice, alternating: the spread shows the noise of a shared machine
    row "decode, lookahead off, run $run" "$short" "$new" 64 K3_SPEC=0 K3_LOOKAHEAD=0
    row "decode, lookahead on, run $run" "$short" "$new" 64 K3_SPEC=0 K3_LOOKAHEAD=1
done
# speculation needs text that repeats, which random weights do not write: bench/bench_spec.sh
[ "${KEEP:-0}" = 1 ] || rm -rf "$model"

#!/usr/bin/env bash
# The MLA cache layouts side by side at long context: decode s/token and peak RSS after an
# N-token prompt, with K3_MLA_CACHE=latent (default) and expanded, alternating run by run.
#
#   bench/bench_context.sh [prompt_tokens] [runs]      (defaults: 8192 2)
#
# Model: synth --preset big --size-gb 0.8 (3 layers, the last one MLA with 8 heads; weights in RAM,
# mapped), written under $BENCH_DIR (default /tmp/deltafin-bench) and kept. On this preset the
# expanded cache holds 8 x (96 + 64) = 1,280 floats per position, the latent one 128 + 32 = 160 (8x);
# on K3 the ratio is 30,720 to 576 (53x) per MLA layer, over 24 MLA layers.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-8192}" runs="${2:-2}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=./build/deltafin
model="$dir/context-big"
mkdir -p "$dir"
[ -f "$model/config.json" ] || $df synth --preset big --size-gb 0.8 --seed 1 --out "$model" --quiet >/dev/null
prompt=$(awk -v n="$n" 'BEGIN { srand(3); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * 1000) }')
echo "model $(du -s --block-size=1 "$model" | awk '{printf "%.2f GB", $1 / 1e9}'), prompt $n tokens, 16 new, $(nproc) cores"
declare -A dec pre rss toks
for r in $(seq "$runs"); do
    for mode in latent expanded; do
        out=$( { /usr/bin/time -f "rss %M" env K3_STORE=mapped K3_SPEC=0 K3_MLA_CACHE=$mode K3_CONTEXT=$((n + 64)) \
            $df run --model "$model" --tokens "$prompt" --max-new 16 --stats >"$dir/context-$mode.tok"; } 2>&1)
        dec[$mode]+="$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1/p' <<<"$out") "
        pre[$mode]+="$(sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' <<<"$out") "
        rss[$mode]+="$(sed -n 's/^rss \([0-9]*\)/\1/p' <<<"$out") "
        toks[$mode]=$(cat "$dir/context-$mode.tok")
    done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for mode in latent expanded; do
    printf '%-9s decode %s s/token (runs: %s) | prefill %s tok/s | peak RSS %.0f MB\n' "$mode" "$(median "${dec[$mode]}")" \
        "${dec[$mode]% }" "$(median "${pre[$mode]}")" "$(awk -v k="$(median "${rss[$mode]}")" 'BEGIN { print k / 1024 }')"
done
awk -v a="$(median "${dec[latent]}")" -v b="$(median "${dec[expanded]}")" 'BEGIN { printf "latent / expanded decode: %.2fx\n", a / b }'
[ "${toks[latent]}" = "${toks[expanded]}" ] && echo "greedy tokens: identical" || echo "greedy tokens: differ (fp32 reduction order)"

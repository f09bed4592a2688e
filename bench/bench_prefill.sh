#!/usr/bin/env bash
# Prefill speed of long prompts: prompt tokens per second and the expert bytes each configuration
# moves, for prompts of several lengths, configurations side by side (one fresh `deltafin run`
# each, the median of RUNS). On a K3-shaped synth model (`synth --preset k3 --layers L`: K3's real
# layer shapes, 896 experts of 17.55 MB per MoE layer) by default.
#
#   bench/bench_prefill.sh [-m MODEL_DIR] [-l LAYERS] [-r RUNS] [-t "512 2048"] "LABEL:ENV ..." ...
#
# e.g. bench/bench_prefill.sh -t "512 2048 8192" "window:K3_DEV=cuda K3_DEV_EXPERT_GB=0" \
#          "64-row passes:K3_DEV=cuda K3_DEV_EXPERT_GB=0 K3_PREFILL_WINDOW=64"
# Every row prints: label, prompt tokens, prefill window, median prefill tokens/s (range), time to
# the first token, and (K3_DEV=cuda) the routed experts the GPU's cache missed per prompt token.
# The first run of each configuration is a warm-up (the page cache, the GPU's start); every run's
# first token must be the same for the same numerics (checked).
set -euo pipefail
cd "$(dirname "$0")/.."
df=${DF:-build/deltafin}
model="" layers=3 runs=3 lengths="512 2048"
while getopts "m:l:r:t:" o; do
    case $o in m) model=$OPTARG ;; l) layers=$OPTARG ;; r) runs=$OPTARG ;; t) lengths=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: bench/bench_prefill.sh [-m DIR] [-l LAYERS] [-r RUNS] [-t LENGTHS] LABEL:ENV..." >&2; exit 2; }
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
if [ -z "$model" ]; then
    model="$dir/k3-$layers"
    [ -f "$model/config.json" ] || "$df" synth --preset k3 --layers "$layers" --seed 2 --out "$model" --quiet
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-34s %7s %7s %22s %10s %14s\n' config tokens window "prefill tok/s (range)" "TTFT s" "misses/token"
vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["text_config"]["vocab_size"])' "$model/config.json")
for n in $lengths; do
    # (a file: a long prompt's ids exceed what one command-line argument may hold)
    awk -v n="$n" -v v="$vocab" 'BEGIN { srand(11); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * (v - 300)) }' >"$tmp/prompt"
    first_tok=""
    for cfg in "$@"; do
        label=${cfg%%:*} envs=${cfg#*:}
        : >"$tmp/rates"
        for r in $(seq 0 "$runs"); do
            # shellcheck disable=SC2086
            env $envs K3_SPEC=0 K3_CONTEXT=$((n + 64)) "$df" run -m "$model" --tokens-file "$tmp/prompt" -n 1 \
                --stats-json "$tmp/s.json" >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
            [ "$r" -eq 0 ] && continue # warm-up
            python3 - "$tmp/s.json" >>"$tmp/rates" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
dc = s.get("device_cache") or {}
print(s["prefill_tokens_per_s"], s["prefill_s"], (dc.get("misses", 0)) / max(1, s["prompt_tokens"]), s["tokens"][0])
EOF
        done
        window=$(sed -n 's/.*prefill window \([0-9]*\).*/\1/p' "$tmp/err" | head -1)
        read -r med lo hi ttft miss tok < <(python3 - "$tmp/rates" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rates = [float(r[0]) for r in rows]
i = sorted(range(len(rows)), key=lambda k: rates[k])[len(rows) // 2]
print(statistics.median(rates), min(rates), max(rates), rows[i][1], rows[i][2], rows[i][3])
EOF
)
        [ -z "$first_tok" ] && first_tok=$tok
        [ "$tok" = "$first_tok" ] || echo "note: $label's first token $tok differs from $first_tok (other numerics?)"
        printf '%-34s %7s %7s %10.1f (%.1f-%.1f) %10.2f %14.2f\n' "$label" "$n" "${window:-?}" "$med" "$lo" "$hi" "$ttft" "$miss"
    done
done

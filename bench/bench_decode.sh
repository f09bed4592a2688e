#!/usr/bin/env bash
# Decode speed with weights in RAM (mapped store): median s/token over several runs of
# `deltafin run`, for the small synth preset and for K3's real layer shapes (synth --preset k3).
# usage: bench/bench_decode.sh [small|k3] [runs]      (k3 writes a ~23 GB model under $BENCH_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-small}" runs="${2:-5}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=./build/deltafin
model="$dir/$which"
case "$which" in
    small) args=(--preset small --seed 1) ; new=64 ;;
    k3) args=(--preset k3 --layers 2 --seed 1) ; new=8 ;;
    *) echo "usage: $0 [small|k3] [runs]"; exit 2 ;;
esac
[ -f "$model/config.json" ] || $df synth "${args[@]}" --out "$model" --quiet
# warm the page cache once so every measured run sees the same (resident) weights
$df run --model "$model" --tokens "1 2 3" --max-new 2 >/dev/null 2>&1
for threads in 1 "$(nproc)"; do
    times=()
    for i in $(seq "$runs"); do
        s=$(K3_THREADS=$threads $df run --model "$model" --tokens "1 2 3 4 5 6 7 8" --max-new "$new" --stats 2>&1 >/dev/null |
            sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1/p')
        times+=("$s")
    done
    sorted=$(printf '%s\n' "${times[@]}" | sort -g)
    median=$(sed -n "$(( (runs + 1) / 2 ))p" <<<"$sorted")
    printf '%s threads=%s: decode median %s s/token (runs: %s)\n' "$which" "$threads" "$median" "$(echo $sorted)"
done

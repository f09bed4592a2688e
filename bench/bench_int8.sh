#!/usr/bin/env bash
# int8 spine and K3_MOE_TOP_K side by side in one run, weights in RAM (mapped store): spine bytes
# per token, median decode s/token of `deltafin run` and NLL of a fixed token file, for bf16,
# int8, and bf16 with fewer experts per token.
# usage: bench/bench_int8.sh [small|big] [runs]      (big: a 0.8 GB model under $BENCH_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-big}" runs="${2:-5}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=./build/deltafin
model="$dir/int8-$which"
case "$which" in
    small) args=(--preset small --seed 1) ; new=64 ; k=2 ;;
    big) args=(--preset big --size-gb 0.8 --seed 1) ; new=32 ; k=8 ;;
    *) echo "usage: $0 [small|big] [runs]"; exit 2 ;;
esac
[ -f "$model/config.json" ] || $df synth "${args[@]}" --out "$model" --quiet
$df convert-spine --model "$model"
seq 3 7 1500 | tr '\n' ' ' >"$dir/int8-nll-tokens"
export K3_STORE=mapped K3_SPEC=0
measure() { # label, then environment assignments
    local label=$1 times=() s
    shift
    env "$@" $df run --model "$model" --tokens "1 2 3" --max-new 2 >/dev/null 2>&1 # page cache warm
    for i in $(seq "$runs"); do
        s=$(env "$@" $df run --model "$model" --tokens "1 2 3 4 5 6 7 8" --max-new "$new" --stats 2>&1 >/dev/null |
            sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1/p')
        times+=("$s")
    done
    local median=$(printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (runs + 1) / 2 ))p")
    local nll=$(env "$@" $df nll --model "$model" --tokens-file "$dir/int8-nll-tokens" 2>/dev/null | awk '{print $2}')
    printf '%-22s decode median %s s/token | nll %s\n' "$label" "$median" "$nll"
}
measure "spine bf16" K3_SPINE=bf16
measure "spine int8" K3_SPINE=int8
measure "bf16, top-$k experts" K3_SPINE=bf16 K3_MOE_TOP_K=$k
measure "int8, top-$k experts" K3_SPINE=int8 K3_MOE_TOP_K=$k

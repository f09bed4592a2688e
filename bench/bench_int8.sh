#!/usr/bin/env bash
# int8 spine and K3_MOE_TOP_K side by side in one run: weight bytes read per decode token, median
# decode s/token of `deltafin run` (configurations alternate run by run, so machine noise hits all
# alike) and the NLL of a fixed token file, for bf16, int8, and bf16 with fewer experts per token.
#
#   bench/bench_int8.sh [small|big|stream] [runs]
#     small, big: weights in RAM (mapped store; big is a 0.8 GB model)
#     stream:     a 6 GB model streamed under K3_RAM_GB=${BUDGET:-0.6} (10x smaller than the model):
#                 the plan pins what fits, so the int8 spine changes what is pinned and read
# Models are written under $BENCH_DIR (default /tmp/deltafin-bench) and kept for reruns.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-big}" runs="${2:-5}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=./build/deltafin
model="$dir/int8-$which"
case "$which" in
    small) args=(--preset small --seed 1) ; new=64 ; k=2 ; store=(K3_STORE=mapped) ;;
    big) args=(--preset big --size-gb 0.8 --seed 1) ; new=32 ; k=8 ; store=(K3_STORE=mapped) ;;
    stream) args=(--preset big --size-gb 6 --seed 7) ; new=24 ; k=8
            store=(K3_STORE=stream K3_RAM_GB="${BUDGET:-0.6}") ;;
    *) echo "usage: $0 [small|big|stream] [runs]"; exit 2 ;;
esac
mkdir -p "$dir"
[ -f "$model/config.json" ] || $df synth "${args[@]}" --out "$model" --quiet
$df convert-spine --model "$model" 2>/dev/null
seq 3 7 1500 | tr '\n' ' ' >"$dir/int8-nll-tokens"
echo "model $(du -s --block-size=1 "$model" | awk '{printf "%.2f GB", $1 / 1e9}') ($which), ${store[*]}, $(nproc) cores"

labels=("spine bf16" "spine int8" "bf16, top-$k experts" "int8, top-$k experts")
envs=("K3_SPINE=bf16" "K3_SPINE=int8" "K3_SPINE=bf16 K3_MOE_TOP_K=$k" "K3_SPINE=int8 K3_MOE_TOP_K=$k")
declare -A times mb plan
one_run() { # index: appends s/token and decode MB per token of one fresh process
    local err
    err=$(env "${store[@]}" K3_SPEC=0 K3_PROFILE=1 ${envs[$1]} $df run --model "$model" --tokens "1 2 3 4 5 6 7 8" \
        --max-new "$new" --stats 2>&1 >/dev/null)
    times[$1]+="$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1/p' <<<"$err") "
    # decode forwards only: the first profile line is the prompt
    mb[$1]+="$(awk '/^profile: pos/ && !first++ { next } /^profile: pos/ { n++; s += $10 + $13 }
                    END { if (n) printf "%.1f", s / n }' <<<"$err") "
    plan[$1]=$(sed -n 's/.*| spine \([0-9.]* GB:[^|]*\)|.*/\1/p' <<<"$err")
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
range() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo ".." hi }'; }
[ "$which" = stream ] || env "${store[@]}" $df run --model "$model" --tokens "1 2 3" --max-new 2 >/dev/null 2>&1 # page cache
for r in $(seq "$runs"); do
    for i in "${!envs[@]}"; do one_run "$i"; done
done
base=$(median "${times[0]}")
for i in "${!envs[@]}"; do
    nll=$(env "${store[@]}" ${envs[$i]} $df nll --model "$model" --tokens-file "$dir/int8-nll-tokens" 2>/dev/null | awk '{print $2}')
    med=$(median "${times[$i]}")
    printf '%-22s decode median %s s/token (%s, %.2fx bf16) | read %s MB/token | nll %s' "${labels[$i]}" "$med" \
        "$(range "${times[$i]}")" "$(awk -v a="$med" -v b="$base" 'BEGIN { print a / b }')" "$(median "${mb[$i]}")" "$nll"
    [ "$which" = stream ] && printf ' | spine %s' "${plan[$i]}"
    echo
done

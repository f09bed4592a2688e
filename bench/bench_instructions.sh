#!/usr/bin/env bash
# Two builds of deltafin compared by the instructions they execute (valgrind's callgrind, one
# compute thread): a count does not depend on what else the machine runs, so a shared or busy
# machine still tells whether a change made prefill or decode do more work. Time is what users feel
# (bench/bench_builds.sh measures it); instructions are what can be compared to the last digit.
#
#   bench/bench_instructions.sh OLD_BIN NEW_BIN [model_dir ...]
#
# Per model: a 64-token prompt with one token generated (prefill: the instructions of that run),
# and the same with 17 tokens (decode: the 16 extra tokens' instructions, per token). Defaults: the
# bundled k3-mini and a synth small model ($BENCH_DIR, default /tmp/deltafin-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "$1") new=$(realpath "$2")
shift 2
command -v valgrind >/dev/null || { echo "bench_instructions: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
mkdir -p "$dir"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    [ -f "$dir/small/config.json" ] || "$new" synth --preset small --seed 1 -o "$dir/small" -q
    models=(models/k3-mini "$dir/small")
fi
prompt=$(awk 'BEGIN { srand(7); for (i = 0; i < 64; i++) printf "%d ", 1 + int(rand() * 1000) }')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # bin model new_tokens -> instructions executed
    K3_THREADS=1 K3_STORE=mapped valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$1" run -m "$2" \
        --tokens "$prompt" -n "$3" --no-spec >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$tmp/err"
}

printf '%-20s %16s %16s %8s %16s %16s %8s\n' model "prefill old" "prefill new" ratio "decode old/tok" "decode new/tok" ratio
for m in "${models[@]}"; do
    po=$(count "$old" "$m" 1) pn=$(count "$new" "$m" 1)
    do_=$(( ($(count "$old" "$m" 17) - po) / 16 )) dn=$(( ($(count "$new" "$m" 17) - pn) / 16 ))
    awk -v m="$(basename "$m")" -v po="$po" -v pn="$pn" -v do_="$do_" -v dn="$dn" \
        'BEGIN { printf "%-20s %16d %16d %7.4fx %16d %16d %7.4fx\n", m, po, pn, pn / po, do_, dn, dn / do_ }'
done
echo "(instructions executed, one compute thread; prefill: a 64-token prompt and its first token, start-up included)"

#!/usr/bin/env bash
# Two builds of deltafin side by side on the CPU: prefill tokens/s and decode s/token of the same
# prompt, runs alternating between the builds (so that a busy machine slows both alike), medians
# and the ratio new/old. For checking that a change to the forward pass costs no speed.
#
#   bench/bench_builds.sh OLD_BIN NEW_BIN [runs] [model_dir ...]
#
# Defaults: 5 runs each; the bundled k3-mini and a synth small model (written under $BENCH_DIR,
# default /tmp/deltafin-bench). Each run is `run --tokens <256 ids> -n 33 --no-spec --stats-json`
# (speculation off: it would make decode depend on the text), mapped weights, all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "$1") new=$(realpath "$2") runs=${3:-5}
shift $(($# < 3 ? $# : 3))
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
mkdir -p "$dir"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    [ -f "$dir/small/config.json" ] || "$new" synth --preset small --seed 1 -o "$dir/small" -q
    models=(models/k3-mini "$dir/small")
fi
prompt=$(awk 'BEGIN { srand(7); for (i = 0; i < 256; i++) printf "%d ", 1 + int(rand() * 3000) }')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

one() { # bin model out.json
    K3_STORE=mapped "$1" run -m "$2" --tokens "$prompt" -n 33 --no-spec --stats-json "$3" >/dev/null 2>"$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-28s %14s %14s %7s %14s %14s %7s\n' model "prefill old" "prefill new" ratio "decode old" "decode new" ratio
for m in "${models[@]}"; do
    one "$old" "$m" "$tmp/warm.json" # page cache warm for both
    : >"$tmp/po"; : >"$tmp/pn"; : >"$tmp/do"; : >"$tmp/dn"
    for r in $(seq "$runs"); do
        for which in old new; do
            bin=$old; [ $which = new ] && bin=$new
            one "$bin" "$m" "$tmp/r.json"
            field "$tmp/r.json" prefill_tokens_per_s >>"$tmp/p${which:0:1}"
            field "$tmp/r.json" s_per_token >>"$tmp/d${which:0:1}"
        done
    done
    po=$(median <"$tmp/po") pn=$(median <"$tmp/pn") do_=$(median <"$tmp/do") dn=$(median <"$tmp/dn")
    printf '%-28s %10.2f t/s %10.2f t/s %6.3fx %12.5f s %12.5f s %6.3fx\n' "$(basename "$m")" "$po" "$pn" \
        "$(awk -v a="$pn" -v b="$po" 'BEGIN { print a / b }')" "$do_" "$dn" "$(awk -v a="$dn" -v b="$do_" 'BEGIN { print a / b }')"
done
echo "(prefill: higher is better; decode s/token: lower is better; medians of $runs runs each, $(nproc) cores)"

#!/usr/bin/env bash
# n-gram speculation (K3_SPEC) end to end: decode with it off and on, side by side, on a synth
# model streamed under a budget smaller than the model (K3_STORE=stream, K3_RAM_GB), for text that
# repeats and text that does not.
#
#   bench/bench_spec.sh [model_gb] [budget_gb] [runs] [new_tokens]      (defaults: 6 2 5 160)
#
# Writes two `synth --preset big --seed 5` models under $BENCH_DIR (default /tmp/deltafin-bench;
# removed at the end unless KEEP=1): an ordinary one, whose random weights never repeat themselves,
# and one with --embed-scale 1024, whose greedy output falls into a loop (the embedding dominates
# every AttnRes mix, so the next token is mostly a function of the current one). Workloads:
#   ordinary  ordinary model, 8-token prompt: drafts are rare and wrong; speculation should cost ~0
#   loop      loop model, same prompt: the output enters a loop partway through the generation
#   quote     loop model, prompt = the 8 tokens + the first 100 the model generates from them, so the
#             continuation repeats text already in the prompt from its first token
# Each run is one fresh process (cold expert cache; O_DIRECT reads, so no page cache carries over).
# Runs alternate: every round runs every workload with speculation off and on, the order of off
# and on swapped from round to round. Per workload: median and range of decode s/token, the ratio
# of medians (off / on: above 1 = speculation faster), drafted / accepted tokens, tokens per pass,
# verify passes, pauses and paused tokens; every run's tokens must be identical (exit 1 if not).
# Then what a verify pass of n rows costs against a plain pass: build/bench/bench_verify (rejected
# random drafts, ordinary model) and the verify passes the loop runs made (from K3_PROFILE).
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-6}" budget="${2:-2}" runs="${3:-5}" new="${4:-160}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df="$PWD/build/deltafin" verify="$PWD/build/bench/bench_verify"
ordinary="$dir/spec-ordinary$size" loop="$dir/spec-loop$size" logs="$dir/spec-logs"
mkdir -p "$dir" "$logs"
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$ordinary" "$loop" "$logs"; }
trap cleanup EXIT
[ -f "$ordinary/config.json" ] || "$df" synth --preset big --size-gb "$size" --seed 5 --out "$ordinary" --quiet >/dev/null
[ -f "$loop/config.json" ] || "$df" synth --preset big --size-gb "$size" --seed 5 --embed-scale 1024 --out "$loop" --quiet >/dev/null
export K3_STORE=stream K3_RAM_GB="$budget" K3_PROFILE=1
echo "models: $(du -s --block-size=1 "$ordinary" | awk '{printf "%.2f GB", $1 / 1e9}') each ($("$df" inspect "$ordinary" |
    sed -n 's/^layers *\([0-9]*\).*/\1 layers/p')), budget K3_RAM_GB=$budget, $(nproc) cores, $new new tokens, $runs runs each"
short="840 394 783 798 911 198 335 768"
quoted="$short $(K3_SPEC=0 "$df" run --model "$loop" --tokens "$short" --max-new 100 2>/dev/null | tail -1)"
declare -A model=([ordinary]="$ordinary" [loop]="$loop" [quote]="$loop") prompt=([ordinary]="$short" [loop]="$short" [quote]="$quoted")
workloads=(ordinary loop quote)

one() { # workload spec run
    local w="$1" s="$2" r="$3"
    K3_SPEC="$s" "$df" run --model "${model[$w]}" --tokens "${prompt[$w]}" --max-new "$new" --stats \
        >"$logs/$w.$s.$r.out" 2>"$logs/$w.$s.$r.err"
}
for r in $(seq "$runs"); do
    for w in "${workloads[@]}"; do
        if [ $((r % 2)) = 1 ]; then one "$w" 0 "$r"; one "$w" 1 "$r"; else one "$w" 1 "$r"; one "$w" 0 "$r"; fi
    done
done

stat() { # median and range of numbers on stdin: "median (min-max)"
    sort -g | awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "%.4f (%.4f-%.4f)", m, a[1], a[NR]}'
}
med() { stat | cut -d' ' -f1; }
spt() { sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1/p' "$@"; }
specline() { grep -h '^stats: speculation' "$@"; }
# decode passes from K3_PROFILE (the first profile line is the prefill): "rows seconds"
passes() { for f in "$@"; do awk '/^profile: pos [0-9]+ \+[0-9]+:/ && n++ { sub(/^\+/, "", $4); sub(/:$/, "", $4); print $4, $5 }' "$f"; done; }
# where the output starts repeating: "loop of P tokens from token I" (the shortest P <= 60)
onset() { tail -1 "$1" | awk '{for (i = 1; i <= NF; i++) for (p = 1; p <= 60 && i + 2 * p - 1 <= NF; p++) {
        ok = 1; for (j = i; j + p <= NF; j++) if ($j != $(j + p)) { ok = 0; break }
        if (ok) { printf "loop of %d tokens from generated token %d", p, i; exit } }
    printf "no loop"}'; }

bad=0
for w in "${workloads[@]}"; do
    ref="$logs/$w.0.1.out"
    for f in "$logs/$w".*.out; do cmp -s "$ref" "$f" || { echo "MISMATCH: $f differs from $ref"; bad=1; }; done
    off=$(spt "$logs/$w".0.*.err | stat) on=$(spt "$logs/$w".1.*.err | stat)
    ratio=$(awk -v a="${off%% *}" -v b="${on%% *}" 'BEGIN {printf "%.2f", a / b}')
    echo "== $w: $(onset "$ref"); tokens identical in all $((2 * runs)) runs: $([ $bad = 0 ] && echo yes || echo NO)"
    echo "   decode s/token, median (range): K3_SPEC=0 $off | K3_SPEC=1 $on | off/on $ratio"
    specline "$logs/$w".1.*.err | awk '{
        for (i = 1; i <= NF; i++) {
            if ($(i + 1) == "passes,") p[NR] = $i; if ($(i + 1) == "tokens/pass;") t[NR] = $i
            if ($(i + 1) == "drafts") v[NR] = $i; if ($(i + 1) == "of" && $(i + 3) == "drafted") { a[NR] = $i; d[NR] = $(i + 2) }
            if ($(i + 1) == "pauses,") z[NR] = $i; if ($(i + 1) == "tokens" && $(i + 2) == "decoded") q[NR] = $i }
        }
        END { printf "   K3_SPEC=1 per run (passes, tokens/pass, verify passes, tokens/verify pass, accepted/drafted, pauses, "
              printf "paused tokens):"
              for (r = 1; r <= NR; r++) printf " [%s %s %s %.2f %s/%s %s %s]", p[r], t[r], v[r], v[r] ? (a[r] + v[r]) / v[r] : 0,
                  a[r], d[r], z[r], q[r]
              print "" }'
    passes "$logs/$w".1.*.err | awk -v w="$w" '$1 > 1 {n[$1]++; s[$1] += $2} $1 == 1 {n1++; s1 += $2}
        END {printf "   passes with K3_SPEC=1: plain %d (mean %.4f s)", n1, n1 ? s1 / n1 : 0
             for (k = 2; k <= 9; k++) if (n[k]) printf ", %d rows %d (mean %.4f s)", k, n[k], s[k] / n[k]; print ""}'
done
plain=$(passes "$logs"/loop.0.*.err "$logs"/quote.0.*.err | awk '{print $2}' | stat)
nine=$(passes "$logs"/loop.1.*.err "$logs"/quote.1.*.err | awk '$1 == 9 {print $2}' | stat)
echo "== verify pass cost in the loop runs: 9 rows $nine s vs plain pass (K3_SPEC=0 runs) $plain s: $(awk \
    -v a="${nine%% *}" -v b="${plain%% *}" 'BEGIN {printf "%.2fx", a / b}') (ratio of medians)"
echo "== verify pass cost, rejected random drafts, ordinary model (build/bench/bench_verify, 12 rounds):"
"$verify" "$ordinary" 12 1 2 3 5 9 2>/dev/null | sed 's/^/   /'
exit $bad

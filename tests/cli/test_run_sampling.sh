#!/usr/bin/env bash
# run's sampling flags: without them decoding stays greedy (the same ids as before); the start-up
# line says how tokens are chosen; a seed reproduces its ids on any thread count and with
# speculation on or off; another seed gives others; a run without --seed prints the seed it drew,
# which reproduces it; top-k 1 is greedy; bad values are refused naming the flag.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/run_sampling"
m="$t/m"
mkdir -p "$t"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null
ids=$(printf '%s' "The capital of France is" | "$DF" tokenize --model "$m")
run() { "$DF" run --model "$m" --tokens "$ids" --max-new 40 "$@" 2>"$t/err"; }
greedy=$(run)
expect_grep "| fp32 greedy$" "$t/err" || fail "the start-up line does not say greedy"
expect_eq "$greedy" "$(run --temperature 0)" "ids at temperature 0 (against greedy)"
expect_no_grep "^sampling:" "$t/err" || fail "greedy printed a sampling line"
a=$(run --temperature 0.9 --top-p 0.95 --seed 21)
expect_grep "seed 21 (sampled, not exact)" "$t/err"
expect_grep "| fp32 sampled (seeded, not exact)$" "$t/err" || fail "the start-up line does not say sampled"
[ "$a" != "$greedy" ] || fail "sampling at temperature 0.9 gave the greedy ids"
expect_eq "$a" "$(K3_THREADS=1 run --temperature 0.9 --top-p 0.95 --seed 21)" "seed 21's ids on 1 thread"
expect_eq "$a" "$(K3_SPEC=0 run --temperature 0.9 --top-p 0.95 --seed 21)" "seed 21's ids without speculation"
[ "$(run --temperature 0.9 --top-p 0.95 --seed 22)" != "$a" ] || fail "seeds 21 and 22 gave the same ids"
# penalties: greedy with a frequency penalty changes the ids, speculation or not
p=$(run --frequency-penalty 1.5)
[ "$p" != "$greedy" ] || fail "a frequency penalty left the greedy ids unchanged"
expect_grep "| fp32 greedy with penalties (not exact)$" "$t/err" || fail "the start-up line does not name the penalties"
expect_eq "$p" "$(K3_SPEC=0 run --frequency-penalty 1.5)" "ids with a frequency penalty without speculation"
# an unseeded run says which seed it drew
b=$(run --temperature 1.1 --min-p 0.05)
seed=$(sed -n 's/.*seed \(-\{0,1\}[0-9]*\) (sampled.*/\1/p' "$t/err")
[ -n "$seed" ] || fail "an unseeded run did not say its seed: $(cat "$t/err")"
expect_eq "$b" "$(run --temperature 1.1 --min-p 0.05 --seed "$seed")" "ids with the seed an unseeded run drew"
# top-k 1 keeps only the most probable token: greedy whatever the temperature
expect_eq "$greedy" "$(run --temperature 1.5 --top-k 1 --seed 3)" "ids with top-k 1 (against greedy)"
# min-p 1, the edge of its range (the server's rule too), keeps only the most probable tokens
mp=$(run --temperature 1.5 --min-p 1 --seed 3) || { echo "--min-p 1 was refused: $(cat "$t/err")"; exit 1; }
[ "$mp" = "$greedy" ] || { echo "--min-p 1 is not greedy: wanted '$greedy', got '$mp'"; exit 1; }
for bad in "--temperature 3" "--top-p 1.5" "--top-k -1" "--min-p 2" "--presence-penalty 9" "--seed x"; do
    expect_fail -- "${bad%% *}" "$DF" run --model "$m" --tokens "$ids" --max-new 40 $bad
done
echo PASS

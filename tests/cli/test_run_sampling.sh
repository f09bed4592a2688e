#!/usr/bin/env bash
# run's sampling flags: without them decoding stays greedy (the same ids as before); the start-up
# line says how tokens are chosen; a seed reproduces its ids on any thread count and with
# speculation on or off; another seed gives others; a run without --seed prints the seed it drew,
# which reproduces it; top-k 1 is greedy; bad values are refused naming the flag.
set -eu
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/run_sampling"
m="$t/m"
mkdir -p "$t"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null
ids=$(printf '%s' "The capital of France is" | "$DF" tokenize --model "$m")
run() { "$DF" run --model "$m" --tokens "$ids" --max-new 40 "$@" 2>"$t/err"; }
greedy=$(run)
grep -q "| fp32 greedy$" "$t/err" || { echo "the start-up line does not say greedy: $(cat "$t/err")"; exit 1; }
[ "$(run --temperature 0)" = "$greedy" ]
grep -q "^sampling:" "$t/err" && { echo "greedy printed a sampling line"; exit 1; }
a=$(run --temperature 0.9 --top-p 0.95 --seed 21)
grep -q "seed 21 (sampled, not exact)" "$t/err"
grep -q "| fp32 sampled (seeded, not exact)$" "$t/err" || { echo "the start-up line does not say sampled"; exit 1; }
[ "$a" != "$greedy" ]
[ "$(K3_THREADS=1 run --temperature 0.9 --top-p 0.95 --seed 21)" = "$a" ]
[ "$(K3_SPEC=0 run --temperature 0.9 --top-p 0.95 --seed 21)" = "$a" ]
[ "$(run --temperature 0.9 --top-p 0.95 --seed 22)" != "$a" ]
# penalties: greedy with a frequency penalty changes the ids, speculation or not
p=$(run --frequency-penalty 1.5)
[ "$p" != "$greedy" ]
grep -q "| fp32 greedy with penalties (not exact)$" "$t/err" || { echo "the start-up line does not name the penalties"; exit 1; }
[ "$(K3_SPEC=0 run --frequency-penalty 1.5)" = "$p" ]
# an unseeded run says which seed it drew
b=$(run --temperature 1.1 --min-p 0.05)
seed=$(sed -n 's/.*seed \(-\{0,1\}[0-9]*\) (sampled.*/\1/p' "$t/err")
[ -n "$seed" ]
[ "$(run --temperature 1.1 --min-p 0.05 --seed "$seed")" = "$b" ]
# top-k 1 keeps only the most probable token: greedy whatever the temperature
[ "$(run --temperature 1.5 --top-k 1 --seed 3)" = "$greedy" ]
for bad in "--temperature 3" "--top-p 1.5" "--top-k -1" "--min-p 2" "--presence-penalty 9" "--seed x"; do
    if run $bad >/dev/null; then echo "accepted $bad"; exit 1; fi
    grep -q -- "${bad%% *}" "$t/err" || { echo "the error for $bad does not name it: $(cat "$t/err")"; exit 1; }
done
echo PASS

#!/usr/bin/env bash
# K3_REPLAY drives the experts with a recorded router trace instead of the router (benchmark only):
# a model's own trace replayed on it is what K3_TRACE records again, line for line (streamed and
# mapped, chunked prefill included); a trace of another shape is mapped by the documented rule,
# checked here against an independent implementation of that rule; the start-up line says the
# output is meaningless; a trace that cannot map, or a damaged one, is refused naming the file.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/replay"
m="$t/small"
mkdir -p "$t"
"$DF" synth --preset small --seed 11 --out "$m" --quiet >/dev/null
prompt="5 17 300 42 42 42 7 1000 3 9 12 600 77 1 2 3 900 4 4 4 81"

# The model's own routing, recorded, then replayed: the replayed run records exactly the same.
rm -f "$t/own.jsonl" "$t/mapped.jsonl"
K3_STORE=mapped K3_SPEC=0 K3_TRACE="$t/own.jsonl" quietly "$DF" run --model "$m" --tokens "$prompt" --max-new 6
for store in stream mapped; do
    rm -f "$t/again.jsonl"
    ram=0.2 # (mapped: room for the model and decoding, or --store mapped is refused)
    [ "$store" = mapped ] && ram=1
    K3_STORE=$store K3_RAM_GB=$ram K3_SPEC=0 K3_REPLAY="$t/own.jsonl" K3_TRACE="$t/again.jsonl" \
        "$DF" run --model "$m" --tokens "$prompt" --max-new 6 --chunk 8 >/dev/null 2>"$t/r.err" || { cat "$t/r.err"; fail "$store replay failed"; }
    cmp -s "$t/own.jsonl" "$t/again.jsonl" || fail "$store: replaying a model's own trace recorded something else"
    expect_grep "BENCHMARK: experts chosen by the router trace $t/own.jsonl.*the output is meaningless" "$t/r.err" ||
        fail "$store: the start-up line does not say the output is meaningless"
done

# Simulated router lookahead only steers reads: the same selections again; with recall 1 the
# guesses are the replayed choices, so most reads are started by them and then used. (Lookahead
# guesses for decode-sized passes only: the prompt goes in one position at a time.)
rm -f "$t/again.jsonl"
K3_STORE=stream K3_RAM_GB=0.2 K3_SPEC=0 K3_LOOKAHEAD=1 K3_REPLAY_LOOKAHEAD=100 K3_REPLAY="$t/own.jsonl" K3_TRACE="$t/again.jsonl" \
    "$DF" run --model "$m" --tokens "$prompt" --max-new 6 --chunk 1 --stats >/dev/null 2>"$t/r.err" || { cat "$t/r.err"; fail "lookahead replay failed"; }
cmp -s "$t/own.jsonl" "$t/again.jsonl" || fail "simulated lookahead changed the replayed selections"
expect_grep "router lookahead simulated" "$t/r.err" || fail "the start-up line does not say lookahead is simulated"
used=$(sed -n 's/.*prefetch \([0-9]*\) started, \([0-9]*\) used.*/\2/p' "$t/r.err")
[ "${used:-0}" -gt 20 ] || fail "recall-1 guesses were not used: $(grep 'prefetch' "$t/r.err")"
expect_fail "K3_REPLAY_LOOKAHEAD: '150' is not a recall in percent in 0..100" \
    env K3_REPLAY="$t/own.jsonl" K3_REPLAY_LOOKAHEAD=150 "$DF" run --model "$m" --tokens "1 2" --max-new 1

# A trace of another shape (3 layers numbered 0, 4, 9 of 16 experts, top-2; 7 rows) on the small
# model (9 MoE layers, 32 experts, top-4): two streams per layer, the rule recomputed in Python.
"$PYTHON" - "$t/other.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for p in range(7):
        f.write(json.dumps({"pos": p, "layers": {str(l): rng.sample(range(16), 2) for l in (9, 0, 4)}}) + "\n")
PY
K3_STORE=stream K3_RAM_GB=0.2 K3_SPEC=0 K3_REPLAY="$t/other.jsonl" K3_TRACE="$t/mapped.jsonl" \
    "$DF" run --model "$m" --tokens "$prompt" --max-new 4 --stats >/dev/null 2>"$t/o.err" || { cat "$t/o.err"; fail "mapped replay failed"; }
"$PYTHON" - "$t/other.jsonl" "$t/mapped.jsonl" <<'PY' || fail "the mapped selections do not follow the rule"
import json, sys
trace = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
layers = sorted(int(k) for k in trace[0]["layers"])          # [0, 4, 9]
Lt, kt, Et, rows = len(layers), 2, 16, len(trace)
moe, k = 9, 4                                                 # small: layers 1..9 are MoE, top-4
r = -(-k // kt)
laps = -(-moe * r // Lt)
assert len(got) == 21 + 4 - 1, len(got)
for p, line in enumerate(got):
    assert line["pos"] == p
    for j in range(moe):
        want = []
        for q in range(r):
            s = j * r + q
            row = (p + (s // Lt) * (rows // laps)) % rows
            want += [q * Et + e for e in trace[row]["layers"][str(layers[s % Lt])]]
        assert line["layers"][str(j + 1)] == want[:k], (p, j, line["layers"][str(j + 1)], want[:k])
PY
expect_grep "expert cache hits" "$t/o.err" || fail "no store statistics"

# Refusals: a trace of more experts than the model has, a damaged trace, a missing file.
printf '{"pos":0,"layers":{"0":[35,1]}}\n' >"$t/wide.jsonl"
expect_fail "K3_REPLAY: $t/wide.jsonl: a trace of 36 experts top-2 needs 2 x 36 experts per layer for a top-4 model; it has 32" \
    env K3_REPLAY="$t/wide.jsonl" "$DF" run --model "$m" --tokens "1 2" --max-new 1
printf '{"pos":0,"layers":{"1":[0,1]}}\n{"pos":1,"layers":{"1":[0,0]}}\n' >"$t/bad.jsonl"
expect_fail "$t/bad.jsonl: line 2: layer 1 selects expert 0 twice" env K3_REPLAY="$t/bad.jsonl" "$DF" run --model "$m" --tokens "1 2" --max-new 1
expect_fail "$t/none.jsonl: cannot open" env K3_REPLAY="$t/none.jsonl" "$DF" run --model "$m" --tokens "1 2" --max-new 1
echo "replay ok"

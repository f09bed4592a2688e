#!/usr/bin/env bash
# deltafin nll: --window scores consecutive windows each from an empty state (the total equals
# separate runs over each window); --mask counts only the marked targets (equal to -log softmax
# of `deltafin logits` rows computed independently); --argmax writes the argmax of those rows;
# bad masks and windows are refused with a message naming them.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/nll"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 6 --out "$t/m" --quiet >/dev/null
a="5 17 300 7 99 100 23 5 700 42"
b="8 1 2 640 33 19"
echo "$a $b" >"$t/ab"
echo "$a" >"$t/a"
echo "$b" >"$t/b"
nll() { "$DF" nll --model "$t/m" "$@"; }

# two windows of 10 tokens = the two sequences scored apart, weighted by their 9 and 5 targets
both=$(nll --tokens-file "$t/ab" --window 10)
echo "$both"
expect_grep "over 14 predicted tokens (perplexity [0-9.]*; 2 windows of up to 10 tokens)" <<<"$both"
na=$(nll --tokens-file "$t/a" | awk '{print $2}')
nb=$(nll --tokens-file "$t/b" | awk '{print $2}')
"$PYTHON" -c "import sys; w, a, b = map(float, sys.argv[1:]); e = (9 * a + 5 * b) / 14; print('windows', w, 'separate', e); sys.exit(abs(w - e) > 2e-6)" \
    "$(awk '{print $2}' <<<"$both")" "$na" "$nb" || fail "the windows' NLL is not the separate runs' weighted mean"
# one window of the whole sequence is the default
expect_eq "$(nll --tokens-file "$t/ab" | awk '{print $2}')" "$(nll --tokens-file "$t/ab" --window 16 | awk '{print $2}')" \
    "NLL with one window of the whole sequence (against the default)"

# a mask: only targets 3, 4 and 12 count; checked against logits rows 2, 3 and 11
echo "0 0 0 1 1 0 0 0 0 0 0 0 1 0 0 0" >"$t/mask"
"$DF_ASAN" nll --model "$t/m" --tokens-file "$t/ab" --mask "$t/mask" --argmax "$t/argmax" >"$t/masked"
cat "$t/masked"
expect_grep "over 3 predicted tokens" "$t/masked"
"$DF" logits --model "$t/m" --tokens "$a $b" --out "$t/logits.f32"
"$PYTHON" - "$t" "$a $b" <<'PY'
import sys
import numpy as np
t, ids = sys.argv[1], [int(x) for x in sys.argv[2].split()]
z = np.fromfile(f"{t}/logits.f32", "<f4").astype(np.float64).reshape(len(ids), -1)
rows = [2, 3, 11]
lse = [np.log(np.exp(z[r] - z[r].max()).sum()) + z[r].max() for r in rows]
want = float(np.mean([l - z[r, ids[r + 1]] for l, r in zip(lse, rows)]))
got = float(open(f"{t}/masked").read().split()[1])
print("masked nll", got, "from logits", want)
assert abs(got - want) < 2e-6, (got, want)
arg = [int(x) for x in open(f"{t}/argmax").read().split()]
assert arg == [int(np.argmax(z[r])) for r in rows], arg
PY

# refusals
echo "0 1 2 1 1 1 1 1 1 1 1 1 1 1 1 1" >"$t/bad"
expect_fail "$t/bad" nll --tokens-file "$t/ab" --mask "$t/bad"
echo "0 1 1" >"$t/short"
expect_fail "$t/short has 3 mask values for 16 tokens" nll --tokens-file "$t/ab" --mask "$t/short"
echo "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0" >"$t/none"
expect_fail "the mask marks no target" nll --tokens-file "$t/ab" --mask "$t/none"
expect_fail -- "--window: 1 is not in 2\.\." nll --tokens-file "$t/ab" --window 1
expect_fail -- "--window: -3 is not in 2\.\." nll --tokens-file "$t/ab" --window -3
expect_fail "a window of 100000000 tokens is outside 2\.\.[0-9]* (the context limit" nll --tokens-file "$t/ab" --window 100000000
echo "nll: ok"

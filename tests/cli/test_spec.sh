#!/usr/bin/env bash
# n-gram speculation (K3_SPEC) is lossless: with it on and off, run prints the same tokens for
# repetitive prompts (drafts found at once), ordinary ones (drafts rare and mostly rejected), a
# model whose output loops (drafts mostly accepted) and a chat prompt (stop token), on several
# model shapes and in the sanitizer build. The state-level properties (forced rejection restores
# the state bit for bit, every cut point) are in tests/unit/test_spec.c.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/spec"
"$DF" synth --preset small --seed 11 --out "$t/small" --quiet >/dev/null
"$DF" synth --preset tiny --seed 4 --out "$t/tiny" --quiet >/dev/null
prompts=(
    "1 2 3 1 2 3 1 2 3 1 2 3 1 2 3"
    "7 7 7 7 7 7 7 7 7 7 7 7"
    "5 17 300 42 42 42 7 600 3 9 12 600 77 1 2 3 4 5 6 7"
    "400 12 9 400 12 9 88 400 12"
    "3"
)
same() { # model, prompt, extra args...
    K3_SPEC=0 "$DF" run --model "$1" --tokens "$2" "${@:3}" >"$t/off" 2>"$t/off.err" || { cat "$t/off.err"; fail "run with K3_SPEC=0"; }
    K3_SPEC=1 "$DF" run --model "$1" --tokens "$2" "${@:3}" --stats >"$t/on" 2>"$t/on.err" || { cat "$t/on.err"; fail "run with K3_SPEC=1"; }
    cmp "$t/off" "$t/on" || fail "speculation changed the tokens: $1, prompt '$2', ${*:3}"
    [ -s "$t/on" ] || fail "no tokens: $1, prompt '$2', ${*:3}"
}
for m in small tiny; do
    for p in "${prompts[@]}"; do
        same "$t/$m" "$p" --max-new 120
        same "$t/$m" "$p" --max-new 9
    done
done
# a longer generation finds drafts in its own text, and --stats reports them
same "$t/small" "${prompts[0]}" --max-new 300
expect_grep -E "speculation on: [0-9]+ passes, [0-9.]+ tokens/pass; [1-9][0-9]* drafts verified" "$t/on.err"
# a model whose greedy output loops (synth --embed-scale) has its drafts accepted: passes of
# several tokens each, every one checked against token-at-a-time decoding
"$DF" synth --preset small --seed 6 --embed-scale 1024 --out "$t/loop" --quiet >/dev/null
same "$t/loop" "5 17 300 42 7" --max-new 200
# (tokens per VERIFY pass, not per pass: how many passes draft at all depends on timing, since
# drafting pauses when verify passes are measured slower than plain ones, as on a loaded machine)
acc=$(sed -n 's/.* drafted tokens accepted (\([0-9.]*\)%).*/\1/p' "$t/on.err")
ver=$(sed -n 's/.*; \([0-9]*\) drafts verified, \([0-9]*\) of [0-9]* drafted tokens.*/\1 \2/p' "$t/on.err")
awk -v a="$acc" -v v="$ver" 'BEGIN { split(v, n, " "); exit !(a > 80 && n[1] > 0 && (n[1] + n[2]) / n[1] > 2) }' ||
    fail "on a looping model: $acc% of drafts accepted (over 80 wanted), verify passes and accepted tokens '$ver' (over 2 tokens a pass wanted)"
# a context limit reached inside a verify pass stops at the same token
K3_CONTEXT=40 same "$t/tiny" "${prompts[0]}" --max-new 100
# chat prompts stop at the end-of-message token the same way
K3_SPEC=0 "$DF" run --model "$t/tiny" --prompt "hello hello hello" --chat --max-new 60 >"$t/c0"
K3_SPEC=1 "$DF" run --model "$t/tiny" --prompt "hello hello hello" --chat --max-new 60 >"$t/c1"
cmp "$t/c0" "$t/c1"
# the sanitizer build agrees
K3_SPEC=1 "$DF_ASAN" run --model "$t/tiny" --tokens "${prompts[0]}" --max-new 30 >"$t/asan"
K3_SPEC=0 "$DF" run --model "$t/tiny" --tokens "${prompts[0]}" --max-new 30 >"$t/plain"
cmp "$t/asan" "$t/plain"
# the state-level properties again with the expanded MLA cache (the unit test runs the default, latent)
K3_MLA_CACHE=expanded "$(dirname "$DF")/tests/test_spec" >"$t/unit.out" 2>&1 || { cat "$t/unit.out"; fail "test_spec with K3_MLA_CACHE=expanded"; }
tail -1 "$t/unit.out" | expect_grep " 0 failed"

# K3_SPEC=0 reports itself off; other values are refused
K3_SPEC=0 "$DF" run --model "$t/tiny" --tokens "3" --max-new 3 --stats 2>&1 >/dev/null | expect_grep "speculation off"
expect_fail "K3_SPEC" env K3_SPEC=2 "$DF" run --model "$t/tiny" --tokens "3" --max-new 3
echo PASS

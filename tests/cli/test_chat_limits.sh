#!/usr/bin/env bash
# deltafin chat's answers end: a model whose greedy output loops is stopped by the repetition
# stop (DELTAFIN_REPEAT_STOP), which the line says; without it the answer limit
# (DELTAFIN_ANSWER_TOKENS) ends the answer, and -n overrides the limit. Each ending is named.
set -euo pipefail
t="$DF_TEST_TMP/chat_limits"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 3 --embed-scale 1024 --out "$t/loop" --quiet >/dev/null
chat() { printf 'Say something.\n' | "$DF" chat --model "$t/loop" "$@" 2>"$t/err"; }
expect_ending() { # what, output
    case "$2" in
        *"$1"*) ;;
        *) echo "wanted the answer to end with '$1', got: $(printf '%s' "$2" | tail -c 300)"; exit 1 ;;
    esac
}
out=$(chat)
expect_ending "[stopped: the answer repeats itself; --no-repeat-stop lets it run]" "$out"
n=$(printf '%s' "$out" | sed -n 's/.*still thinking after \([0-9]*\) tokens.*/\1/p')
[ -n "$n" ] && [ "$n" -ge 128 ] && [ "$n" -lt 8192 ] || { echo "the loop was stopped after '$n' tokens (wanted 128..8191)"; exit 1; }
out=$(DELTAFIN_ANSWER_TOKENS=200 chat --no-repeat-stop)
expect_ending "(still thinking after 200 tokens" "$out"
expect_ending "[answer limit of 200 tokens reached: -n N for more]" "$out"
out=$(DELTAFIN_ANSWER_TOKENS=200 chat --no-repeat-stop -n 260)
expect_ending "(still thinking after 260 tokens" "$out"
expect_ending "[--max-new 260 reached]" "$out"
echo PASS

#!/usr/bin/env bash
# run: text prompts encode like `tokenize`, text output is exactly the detokenized ids, chat mode
# renders K3's format, and Ctrl-C stops cleanly keeping what was generated.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/run"
m="$t/m"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null
prompt="The capital of France is"
ids=$(printf '%s' "$prompt" | "$DF" tokenize --model "$m")
gen=$("$DF" run --model "$m" --tokens "$ids" --max-new 16)
expect_eq 16 "$(wc -w <<<"$gen")" "tokens generated"
"$DF" run --model "$m" --prompt "$prompt" --max-new 16 >"$t/text"
printf '%s' "$gen" | "$DF" detokenize --model "$m" >"$t/want"
printf '\n' >>"$t/want"
cmp "$t/text" "$t/want"
# same generation through the sanitizer build, with --stats
"$DF_ASAN" run --model "$m" --tokens "$ids" --max-new 16 --stats 2>"$t/stats" >"$t/asan"
expect_eq "$gen" "$(cat "$t/asan")" "the sanitizer build's tokens"
expect_grep "s/token" "$t/stats"
expect_grep "expert bytes" "$t/stats"
# chat: the rendered prompt is K3's format (exactly the ids `tokenize --chat` renders for the same
# message: the same count, continued by the same greedy tokens), and generation ends at
# <|end_of_msg|> (not emitted) or --max-new
printf '[{"role": "user", "content": "Hello"}]' >"$t/hello.json"
rendered=$("$DF" tokenize --model "$m" --chat "$t/hello.json")
"$DF" run --model "$m" --prompt "Hello" --chat --max-new 8 --stats-json "$t/chat.json" >/dev/null 2>"$t/chat.err"
plain=$("$DF" run --model "$m" --tokens "$rendered" --max-new 8)
eos=$("$DF" inspect "$m" | sed -n 's/.*eos \([0-9]*\).*/\1/p')
"$PYTHON" - "$t/chat.json" "$(wc -w <<<"$rendered")" "$plain" "$eos" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n_prompt, plain, eos = int(sys.argv[2]), [int(x) for x in sys.argv[3].split()], int(sys.argv[4])
assert j["prompt_tokens"] == n_prompt, ("prompt tokens", j["prompt_tokens"], n_prompt)
want = plain[:plain.index(eos)] if eos in plain else plain
assert j["tokens"] == want, ("chat tokens", j["tokens"], want)
assert j["hit_stop"] == (eos in plain), ("stopped at <|end_of_msg|>", j["hit_stop"])
PY
# Ctrl-C: stops at the next token, keeps the output, exit status 130
K3_CONTEXT=100000 "$DF" run --model "$m" --tokens "$ids" --max-new 100000 >"$t/int.out" 2>"$t/int.err" &
pid=$!
sleep 1.5
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
expect_eq 130 "$rc" "run's exit status after Ctrl-C"
expect_grep "interrupted after" "$t/int.err"
[ "$(wc -w <"$t/int.out")" -ge 1 ] || fail "run printed no token before Ctrl-C"
# errors name the problem
expect_fail "exactly one of -p/--prompt, -f/--file, --tokens and --tokens-file" "$DF" run --model "$m"
expect_fail "nowhere" "$DF" run --model "$t/nowhere" --tokens 1
echo PASS

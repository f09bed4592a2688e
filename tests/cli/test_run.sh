#!/usr/bin/env bash
# run: text prompts encode like `tokenize`, text output is exactly the detokenized ids, chat mode
# renders K3's format, and Ctrl-C stops cleanly keeping what was generated.
set -eu
t="$DF_TEST_TMP/run"
m="$t/m"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null
prompt="The capital of France is"
ids=$(printf '%s' "$prompt" | "$DF" tokenize --model "$m")
gen=$("$DF" run --model "$m" --tokens "$ids" --max-new 16 2>/dev/null)
[ "$(wc -w <<<"$gen")" -eq 16 ]
"$DF" run --model "$m" --prompt "$prompt" --max-new 16 2>/dev/null >"$t/text"
printf '%s' "$gen" | "$DF" detokenize --model "$m" >"$t/want"
printf '\n' >>"$t/want"
cmp "$t/text" "$t/want"
# same generation through the sanitizer build, with --stats
"$DF_ASAN" run --model "$m" --tokens "$ids" --max-new 16 --stats 2>"$t/stats" >"$t/asan"
[ "$(cat "$t/asan")" = "$gen" ]
grep -q "s/token" "$t/stats"
grep -q "expert bytes" "$t/stats"
# chat: the rendered prompt is K3's format and generation ends at <|end_of_msg|> or --max-new
"$DF" run --model "$m" --prompt "Hello" --chat --max-new 8 >/dev/null 2>"$t/chat.err"
# Ctrl-C: stops at the next token, keeps the output, exit status 130
K3_CONTEXT=100000 "$DF" run --model "$m" --tokens "$ids" --max-new 100000 >"$t/int.out" 2>"$t/int.err" &
pid=$!
sleep 1.5
kill -INT "$pid"
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 130 ]
grep -q "interrupted after" "$t/int.err"
[ "$(wc -w <"$t/int.out")" -ge 1 ]
# errors name the problem
! "$DF" run --model "$m" 2>"$t/err"
grep -q "exactly one of -p/--prompt and --tokens" "$t/err"
! "$DF" run --model "$t/nowhere" --tokens 1 2>"$t/err"
grep -q "nowhere" "$t/err"
echo PASS

#!/usr/bin/env bash
# What the commands print besides their output: a short start-up line by default (the model, the
# device and threads, exact or which lossy modes), the full one with --verbose or --stats, none
# with -q/--quiet (or DELTAFIN_QUIET=1); a command's help lists its own settings, not all of them;
# every variable is DELTAFIN_*, the older K3_* names still read; run --chat and chat show a tool
# call the model makes, and run --chat ends the thinking (dim on a terminal) with a line break
# before the answer. Tool calls and thinking are checked on the bundled k3-mini, which makes one.
set -euo pipefail
t="$DF_TEST_TMP/output_modes"
rm -rf "$t"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
bundled="$root/models/k3-mini"
m="$t/m"
"$DF" synth --preset small --seed 4 --out "$m" --quiet
unset DELTAFIN_QUIET DELTAFIN_VERBOSE K3_THREADS DELTAFIN_THREADS

# --- the start-up line: short, full, none
"$DF" run -m "$m" -p x -n 2 >/dev/null 2>"$t/short"
[ "$(wc -l <"$t/short")" -eq 1 ] || fail "the default start-up is not one line: $(cat "$t/short")"
[ "$(wc -c <"$t/short")" -lt 100 ] || fail "the default start-up line is long: $(cat "$t/short")"
grep -qE "^deltafin: m \| cpu, [0-9]+ threads? \| exact \(fp32, greedy\)$" "$t/short" || fail "short line: $(cat "$t/short")"
"$DF" run -m "$m" -p x -n 2 --verbose >/dev/null 2>"$t/full"
grep -q "A_log per-head | speculation n-gram (lossless) | fp32 greedy$" "$t/full" || fail "--verbose: $(cat "$t/full")"
"$DF" run -m "$m" -p x -n 2 --stats >/dev/null 2>"$t/stats"
grep -q "A_log per-head" "$t/stats" || fail "--stats does not show the full start-up line: $(cat "$t/stats")"
"$DF" run -m "$m" -p x -n 2 -q >/dev/null 2>"$t/quiet"
[ ! -s "$t/quiet" ] || fail "-q printed: $(cat "$t/quiet")"
DELTAFIN_QUIET=1 "$DF" run -m "$m" -p x -n 2 --temperature 0.5 >/dev/null 2>"$t/quiet"
[ ! -s "$t/quiet" ] || fail "DELTAFIN_QUIET=1 printed: $(cat "$t/quiet")"
# lossy modes are named on the short line too
"$DF" run -m "$m" -p x -n 2 --moe-top-k 2 --temperature 0.5 --seed 1 >/dev/null 2>"$t/lossy"
grep -q "| experts top-2 of 4 (lossy) | sampled (seeded, not exact)$" "$t/lossy" || fail "lossy modes: $(cat "$t/lossy")"

# --- help: the command's settings first, the rest by reference
"$DF" run --help >"$t/help"
grep -q "^settings it uses" "$t/help" || fail "run --help has no 'settings it uses'"
grep -q -- "--threads N" "$t/help" && grep -q -- "--effort" "$t/help" || fail "run --help lacks its settings"
if grep -q -- "--fetch-parallel" "$t/help"; then fail "run --help lists install settings"; fi
grep -q "deltafin help settings" "$t/help" || fail "run --help does not point to deltafin help settings"
[ "$(wc -l <"$t/help")" -lt 80 ] || fail "run --help is $(wc -l <"$t/help") lines"
"$DF" help settings >"$t/all"
grep -q -- "--fetch-parallel N" "$t/all" || fail "help settings lacks --fetch-parallel"
# bash completion still offers every setting's option (the help lists only some)
words=$(bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _deltafin; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$root/scripts/deltafin.bash" "$DF" run --fetch-par)
[ "$words" = "--fetch-parallel" ] || fail "completion of run --fetch-par: $words"

# --- DELTAFIN_* names, K3_* aliases
DELTAFIN_THREADS=1 "$DF" run -m "$m" -p x -n 1 --verbose >/dev/null 2>"$t/err"
grep -q "| threads 1 |" "$t/err" || fail "DELTAFIN_THREADS=1 not applied: $(cat "$t/err")"
K3_THREADS=1 "$DF" run -m "$m" -p x -n 1 --verbose >/dev/null 2>"$t/err"
grep -q "| threads 1 |" "$t/err" || fail "K3_THREADS=1 (the older name) not applied: $(cat "$t/err")"
rc=0
DELTAFIN_THREADS=2 K3_THREADS=1 "$DF" run -m "$m" -p x -n 1 >/dev/null 2>"$t/err" || rc=$?
[ "$rc" -eq 1 ] && grep -qF "DELTAFIN_THREADS=2 and its older name K3_THREADS=1 disagree" "$t/err" \
    || fail "two spellings that disagree: exit $rc: $(cat "$t/err")"
"$DF" settings >"$t/list"
if grep -q "^K3_" "$t/list"; then fail "settings lists a K3_ name first: $(grep "^K3_" "$t/list" | head -1)"; fi
grep -q "^DELTAFIN_CONTEXT=" "$t/list" && grep -q "also K3_CONTEXT" "$t/list" || fail "settings: DELTAFIN_CONTEXT"

# --- tool calls and thinking, on the bundled model
"$DF" run -m "$bundled" --chat -p "What is 2+2?" -n 300 -q >"$t/call.out" 2>"$t/call.err"
grep -q '^\[tool call\] calculate {"expression": ' "$t/call.out" || fail "run --chat dropped the tool call: $(cat "$t/call.out")"
printf 'What is 2+2?\n' | "$DF" chat -m "$bundled" -n 300 -q >"$t/chat.out" 2>"$t/chat.err"
grep -q '\[tool call\] calculate {"expression": ' "$t/chat.out" || fail "chat dropped the tool call: $(cat "$t/chat.out")"
if grep -q "still thinking" "$t/chat.out"; then fail "chat says it is still thinking after a tool call"; fi
"$DF" run -m "$bundled" --chat -p "What does the word friend mean?" -n 300 -q >"$t/ans.out" 2>"$t/ans.err"
[ -s "$t/ans.out" ] && [ -s "$t/ans.err" ] || fail "no answer or no thinking"
[ "$(tail -c 1 "$t/ans.err" | od -An -c | tr -d ' ')" = '\n' ] || fail "the thinking does not end its line"
# on a terminal (script gives a pty): dim thinking, reset and a line break before the answer
script -qec "'$DF' run -m '$bundled' --chat -p 'What does the word friend mean?' -n 300 -q" /dev/null >"$t/tty" </dev/null
printf '\033[2m' >"$t/dim"
grep -qF "$(cat "$t/dim")" "$t/tty" || fail "thinking is not dim on a terminal: $(od -c "$t/tty" | head -3)"
"$PYTHON" - "$t/tty" "$(cat "$t/ans.out")" <<'EOF'
import sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace").replace("\r\n", "\n")
answer = sys.argv[2].strip()
at = raw.find(answer)
assert at > 0, ("the answer is not on the terminal", raw)
assert raw[:at].endswith("\x1b[0m\n"), ("the thinking is not reset and ended before the answer", raw[:at][-40:])
EOF
echo PASS

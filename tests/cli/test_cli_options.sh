#!/usr/bin/env bash
# The command line: llama.cpp-style short options give what the long ones give; every setting is an
# option of every command and overrides its variable through the same validation; "--" ends the
# options; help and --version; refusals name the option, suggest the closest spelling, and exit 2.
set -eu
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/cli_options"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
m="$t/small"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null

# usage(status, message, command...): exits with status, one line on stderr containing message
usage() {
    local want="$1" msg="$2"
    shift 2
    set +e
    "$@" >"$t/out" 2>"$t/err"
    local rc=$?
    set -e
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, expected $want: $(cat "$t/err")"
    [ "$(wc -l <"$t/err")" -eq 1 ] || fail "$*: not one line: $(cat "$t/err")"
    grep -qF -- "$msg" "$t/err" || fail "$*: '$(cat "$t/err")' does not say '$msg'"
}

# --- short options are the long ones: the same tokens, byte for byte
"$DF" run --model "$m" --prompt "The capital of France is" --max-new 6 --threads 1 >"$t/long" 2>/dev/null
"$DF" run -m "$m" -p "The capital of France is" -n 6 -t 1 >"$t/short" 2>/dev/null
"$DF" run -p "The capital of France is" --n-predict=6 -t1 --model="$m" >"$t/mixed" 2>/dev/null
cmp "$t/long" "$t/short" && cmp "$t/long" "$t/mixed"
[ -s "$t/long" ] || fail "no output"
# -c is the context: a 3-token prompt in an 8-position context stops after 6 tokens
"$DF" run -m "$m" --tokens "1 2 3" -n 20 -c 8 >"$t/ctx" 2>"$t/ctx.err"
[ "$(wc -w <"$t/ctx")" -eq 6 ] || fail "-c 8 gave $(wc -w <"$t/ctx") tokens"
grep -q "context 8 " "$t/ctx.err" || fail "-c not applied: $(cat "$t/ctx.err")"

# --- an option overrides its environment variable, and says where a value came from
K3_THREADS=2 "$DF" run -m "$m" --tokens "1 2" -n 1 -t 1 >/dev/null 2>"$t/err"
grep -q "| threads 1 |" "$t/err" || fail "-t did not override K3_THREADS: $(cat "$t/err")"
K3_THREADS=2 "$DF" settings --threads 1 >"$t/list"
grep -q '^DELTAFIN_THREADS=1   \[set\] by --threads' "$t/list" || fail "settings: $(grep THREADS "$t/list")"
# the same validation as the variable, naming the option
usage 2 "run: -t: '0' is not a thread count in 1..1024" "$DF" run -m "$m" -p x -t 0
usage 2 "run: --ctx-size: 'lots' is not a position count" "$DF" run -m "$m" -p x --ctx-size lots
usage 2 "synth: --store: 'disk' is not auto, mapped or stream" "$DF" synth --preset tiny -o "$t/never" --store disk
[ ! -e "$t/never" ] || fail "synth ran despite a bad option"
# a bad variable is still refused even when an option would override it
usage 1 "K3_THREADS: 'x' is not a thread count" env K3_THREADS=x "$DF" run -m "$m" -p x -t 1
# booleans: --spec, --spec=0, --no-spec
"$DF" run -m "$m" --tokens "1 2" -n 1 --no-spec >/dev/null 2>"$t/err"
grep -q "speculation off" "$t/err" || fail "--no-spec: $(cat "$t/err")"
"$DF" run -m "$m" --tokens "1 2" -n 1 --spec=0 >/dev/null 2>"$t/err"
grep -q "speculation off" "$t/err" || fail "--spec=0: $(cat "$t/err")"
usage 2 "unexpected argument '0' (a value of --spec is written --spec=0)" "$DF" run -m "$m" -p x --spec 0

# --- "--" ends the options: a prompt that starts with a dash
"$DF" run -m "$m" -n 3 -p -- >/dev/null 2>&1 || fail "-p with a value '--'"
printf '%s' "-x is a prompt" | "$DF" tokenize -m "$m" >"$t/ids"
"$DF" run -m "$m" -n 3 --tokens "$(cat "$t/ids")" >"$t/dash.want" 2>/dev/null
"$DF" run -m "$m" -n 3 --prompt="-x is a prompt" >"$t/dash.text" 2>/dev/null
"$DF" run -m "$m" -n 3 --tokens "$(cat "$t/ids")" -- >"$t/dash.got" 2>/dev/null
cmp "$t/dash.want" "$t/dash.got"
usage 2 "inspect: unexpected argument '--stats'" "$DF" inspect -- "$m" --stats

# --- refusals: unknown, misspelt, ambiguous, a variable's name, one dash, missing values
usage 2 "run: unknown option --mdoel (did you mean --model?)" "$DF" run --mdoel "$m" -p x
usage 2 "run: unknown option --max-nwe (did you mean --max-new?)" "$DF" run -m "$m" -p x --max-nwe 3
usage 2 "chat: unknown option --show-thiking (did you mean --show-thinking?)" "$DF" chat -m "$m" --show-thiking
usage 2 "run: unknown option --zzzzzz (deltafin help run)" "$DF" run -m "$m" -p x --zzzzzz
usage 2 "run: option --s is ambiguous: --stats" "$DF" run -m "$m" -p x --s
usage 2 "run: K3_THREADS is an environment variable; its option is --threads" "$DF" run -m "$m" -p x --K3_THREADS=2
usage 2 "run: '-model': a long option takes two dashes (did you mean --model?)" "$DF" run -model "$m" -p x
usage 2 "run: --max-new needs a value: N" "$DF" run -m "$m" -p x --max-new
usage 2 "run: --max-new: -3 is not in 0..16777216" "$DF" run -m "$m" -p x -n -3
usage 2 "run: --max-new: '4x' is not a whole number" "$DF" run -m "$m" -p x -n 4x
usage 2 "run: --chat takes no value" "$DF" run -m "$m" -p x --chat=yes
usage 2 "run: unknown option -Z" "$DF" run -m "$m" -p x -Z
usage 2 "logits: unexpected argument 'hello'" "$DF" logits -m "$m" --tokens 1 -o "$t/l.bin" hello
usage 2 "run: the prompt is given twice ('hello' and -p)" "$DF" run -m "$m" -p x hello
usage 2 "run: unexpected argument 'there' (it takes at most 1: the prompt)" "$DF" run -m "$m" hello there
usage 2 "run: give the prompt as an argument, or with exactly one of -p/--prompt and --tokens" "$DF" run -m "$m"
usage 2 "unknown command 'rnu' (did you mean run?)" "$DF" rnu
usage 2 "unknown command 'serv' (did you mean serve?)" "$DF" serv
usage 2 "unknown command 'frobnicate'; deltafin help lists them" "$DF" frobnicate
usage 2 "'-m': options come after the command" "$DF" -m "$m" run
usage 2 "unknown command 'sevre' (did you mean serve?)" "$DF" help sevre

# --- help: deltafin help CMD is CMD --help; every command has one that lists its options
"$DF" help serve >"$t/h1"
"$DF" serve --help >"$t/h2"
cmp "$t/h1" "$t/h2"
grep -q "^usage: deltafin serve" "$t/h1" && grep -q -- "--port N" "$t/h1" && grep -q -- "--host ADDR" "$t/h1" ||
    fail "serve help: $(head -3 "$t/h1")"
if grep -q "^usage: deltafin COMMAND" "$t/h1"; then fail "help serve printed the general help"; fi
"$DF" --help >"$t/top"
commands=$(awk '/^commands:$/ { on = 1; next } /^$/ { on = 0 } on { print $1 }' "$t/top")
[ "$(echo "$commands" | wc -l)" -ge 17 ] || fail "commands listed: $commands"
for c in $commands; do
    "$DF" help "$c" >"$t/help.$c" || fail "help $c failed"
    grep -q "^usage: deltafin $c" "$t/help.$c" || fail "help $c: $(head -1 "$t/help.$c")"
    grep -q -- "-h, --help" "$t/help.$c" || fail "help $c lists no options"
done
grep -q -- "-p, --prompt TEXT" "$t/help.run" && grep -q -- "-n, --max-new N" "$t/help.run" &&
    grep -q -- "-m, --model DIR" "$t/help.run" && grep -q -- "-t, --threads N" "$t/help.run" &&
    grep -q -- "-c, --ctx-size N" "$t/help.run" || fail "run's help lacks the short options"
"$DF" help settings >"$t/hs"
for v in $("$DF" settings | sed -n 's/^\([A-Z][A-Z0-9_]*\)=.*/\1/p'); do
    grep -q "$v" "$t/hs" || fail "help settings does not list $v"
done
"$DF" >/dev/null 2>"$t/err" && fail "no command: exit 0"
grep -q "^usage: deltafin COMMAND" "$t/err" || fail "no command: no usage on stderr"

# --- --version: version, revision, build, kernels, CUDA; from any command too
"$DF" --version >"$t/v"
grep -qE '^deltafin [0-9]+\.[0-9]+\.[0-9]+ \(' "$t/v" || fail "version: $(cat "$t/v")"
grep -q "kernels .*portable (this CPU: .*portable)" "$t/v" && grep -q "CUDA: " "$t/v" || fail "version: $(cat "$t/v")"
"$DF" run --version | cmp - "$t/v"

# --- bench passes the setting options it is given to every run it starts
"$DF" bench -m "$m" --tokens "1 2 3" -n 2 --runs 1 -t 1 --json "$t/b.json" >/dev/null 2>&1
"$PYTHON" - "$t/b.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
env = d["inherited_env"]
assert env.get("DELTAFIN_THREADS") == "1" and env.get("DELTAFIN_ROOT"), env
PY

# --- the sanitizer build parses the same way (no leak, no overflow in the option tables)
"$DF_ASAN" run -m "$m" -p "The capital of France is" -n 6 -t 1 >"$t/asan" 2>"$t/asan.err"
cmp "$t/asan" "$t/short"
"$DF_ASAN" help run >/dev/null
"$DF_ASAN" run -m "$m" --max-nwe 3 2>/dev/null && fail "asan: a bad option was accepted"
if grep -q Sanitizer "$t/asan.err"; then fail "sanitizer: $(cat "$t/asan.err")"; fi
echo PASS

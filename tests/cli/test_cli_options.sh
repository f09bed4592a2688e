#!/usr/bin/env bash
# The command line: llama.cpp-style short options give what the long ones give; every setting is an
# option of every command and overrides its variable through the same validation; "--" ends the
# options; help and --version; refusals name the option, suggest the closest spelling, and exit 2.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/cli_options"
mkdir -p "$t"
m="$t/small"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null

# usage(status, message, command...): exits with status, one line on stderr containing message
usage() {
    local want="$1" msg="$2"
    shift 2
    local rc=0
    "$@" >"$t/out" 2>"$t/err" || rc=$?
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, expected $want: $(cat "$t/err")"
    [ "$(wc -l <"$t/err")" -eq 1 ] || fail "$*: not one line: $(cat "$t/err")"
    expect_grep -F -- "$msg" "$t/err" || fail "$*"
}

# --- short options are the long ones: the same tokens, byte for byte
"$DF" run --model "$m" --prompt "The capital of France is" --max-new 6 --threads 1 >"$t/long"
"$DF" run -m "$m" -p "The capital of France is" -n 6 -t 1 >"$t/short"
"$DF" run -p "The capital of France is" --n-predict=6 -t1 --model="$m" >"$t/mixed"
cmp "$t/long" "$t/short" && cmp "$t/long" "$t/mixed"
[ -s "$t/long" ] || fail "no output"
# -f reads the prompt's text from a file, --tokens-file its ids (a long prompt's ids exceed what one
# argument may hold): the same tokens as -p and --tokens
printf 'The capital of France is' >"$t/prompt.txt"
"$DF" run -m "$m" -f "$t/prompt.txt" -n 6 -t 1 >"$t/file"
cmp "$t/long" "$t/file" || fail "-f gave other tokens than -p"
seq 1 3000 | awk '{printf "%d\n", ($1 * 37) % 1000 + 3}' >"$t/ids.txt"
"$DF" run -m "$m" --tokens "$(tr '\n' ' ' <"$t/ids.txt")" -n 4 -c 3100 >"$t/ids.args"
"$DF" run -m "$m" --tokens-file "$t/ids.txt" -n 4 -c 3100 >"$t/ids.file"
cmp "$t/ids.args" "$t/ids.file" || fail "--tokens-file gave other tokens than --tokens"
"$DF" logits -m "$m" --tokens "5 6 7" --out "$t/l.args"
printf '5 6\n7\n' >"$t/ids3.txt"
"$DF" logits -m "$m" --tokens-file "$t/ids3.txt" --out "$t/l.file"
cmp "$t/l.args" "$t/l.file" || fail "logits --tokens-file gave other logits than --tokens"
usage 2 "exactly one of -p/--prompt, -f/--file, --tokens and --tokens-file" "$DF" run -m "$m" -p x -f "$t/prompt.txt"
expect_fail "run: -f/--file: .*$t/missing" "$DF" run -m "$m" -f "$t/missing"
printf '5 6\n99999\n7' >"$t/bad_ids.txt" # the message quotes the bad word alone, on one line
expect_fail -x "deltafin: $t/bad_ids.txt: token list: '99999' is not a token id in 0\.\.[0-9]*" "$DF" run -m "$m" --tokens-file "$t/bad_ids.txt"
printf '5 6\0 7' >"$t/nul_ids.txt" # what follows a NUL byte is not silently dropped
expect_fail "$t/nul_ids.txt holds a NUL byte" "$DF" run -m "$m" --tokens-file "$t/nul_ids.txt"
# -c is the context: a 3-token prompt in an 8-position context stops after 6 tokens
"$DF" run -m "$m" --tokens "1 2 3" -n 20 -c 8 >"$t/ctx" 2>"$t/ctx.err"
[ "$(wc -w <"$t/ctx")" -eq 6 ] || fail "-c 8 gave $(wc -w <"$t/ctx") tokens"
expect_grep "context 8 " "$t/ctx.err" || fail "-c not applied"

# --- an option overrides its environment variable, and says where a value came from
K3_THREADS=2 "$DF" run -m "$m" --tokens "1 2" -n 1 -t 1 >/dev/null 2>"$t/err"
expect_grep "| threads 1 |" "$t/err" || fail "-t did not override K3_THREADS"
K3_THREADS=2 "$DF" settings --threads 1 >"$t/list"
expect_grep '^DELTAFIN_THREADS=1   \[set\] by --threads' "$t/list"
# the same validation as the variable, naming the option
usage 2 "run: -t: '0' is not a thread count in 1..1024" "$DF" run -m "$m" -p x -t 0
usage 2 "run: --ctx-size: 'lots' is not a position count" "$DF" run -m "$m" -p x --ctx-size lots
usage 2 "synth: --store: 'disk' is not auto, mapped or stream" "$DF" synth --preset tiny -o "$t/never" --store disk
[ ! -e "$t/never" ] || fail "synth ran despite a bad option"
# a bad variable is still refused even when an option would override it
usage 1 "K3_THREADS: 'x' is not a thread count" env K3_THREADS=x "$DF" run -m "$m" -p x -t 1
# booleans: --spec, --spec=0, --no-spec
"$DF" run -m "$m" --tokens "1 2" -n 1 --no-spec >/dev/null 2>"$t/err"
expect_grep "speculation off" "$t/err" || fail "--no-spec"
"$DF" run -m "$m" --tokens "1 2" -n 1 --spec=0 >/dev/null 2>"$t/err"
expect_grep "speculation off" "$t/err" || fail "--spec=0"
usage 2 "unexpected argument '0' (a value of --spec is written --spec=0)" "$DF" run -m "$m" -p x --spec 0

# --- "--" ends the options: a prompt that starts with a dash
quietly "$DF" run -m "$m" -n 3 -p -- || fail "-p with a value '--'"
printf '%s' "-x is a prompt" | "$DF" tokenize -m "$m" >"$t/ids"
"$DF" run -m "$m" -n 3 --tokens "$(cat "$t/ids")" >"$t/dash.want"
"$DF" run -m "$m" -n 3 --prompt="-x is a prompt" >"$t/dash.text"
"$DF" run -m "$m" -n 3 --tokens "$(cat "$t/ids")" -- >"$t/dash.got"
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
usage 2 "run: the prompt is given twice ('hello' and an option)" "$DF" run -m "$m" -p x hello
usage 2 "run: unexpected argument 'there' (it takes at most 1: the prompt)" "$DF" run -m "$m" hello there
usage 2 "run: give the prompt as an argument, or with exactly one of -p/--prompt, -f/--file, --tokens and --tokens-file" "$DF" run -m "$m"
usage 2 "unknown command 'rnu' (did you mean run?)" "$DF" rnu
usage 2 "unknown command 'serv' (did you mean serve?)" "$DF" serv
usage 2 "unknown command 'frobnicate'; deltafin help lists them" "$DF" frobnicate
usage 2 "'-m': options come after the command" "$DF" -m "$m" run
usage 2 "unknown command 'sevre' (did you mean serve?)" "$DF" help sevre

# --- help: deltafin help CMD is CMD --help; every command has one that lists its options
"$DF" help serve >"$t/h1"
"$DF" serve --help >"$t/h2"
cmp "$t/h1" "$t/h2"
for want in "^usage: deltafin serve" "--port N" "--host ADDR"; do expect_grep -- "$want" "$t/h1"; done
expect_no_grep "^usage: deltafin COMMAND" "$t/h1" || fail "help serve printed the general help"
"$DF" --help >"$t/top"
commands=$(awk '/^commands:$/ { on = 1; next } /^$/ { on = 0 } on { print $1 }' "$t/top")
[ "$(echo "$commands" | wc -l)" -ge 17 ] || fail "commands listed: $commands"
for c in $commands; do
    "$DF" help "$c" >"$t/help.$c" || fail "help $c failed"
    expect_grep "^usage: deltafin $c" "$t/help.$c"
    expect_grep -- "-h, --help" "$t/help.$c" || fail "help $c lists no options"
done
for want in "-p, --prompt TEXT" "-n, --max-new N" "-m, --model DIR" "-t, --threads N" "-c, --ctx-size N"; do
    expect_grep -- "$want" "$t/help.run" || fail "run's help lacks the short options"
done
"$DF" help settings >"$t/hs"
for v in $("$DF" settings | sed -n 's/^\([A-Z][A-Z0-9_]*\)=.*/\1/p'); do
    expect_grep "$v" "$t/hs" || fail "help settings does not list $v"
done
"$DF" >/dev/null 2>"$t/err" && fail "no command: exit 0"
expect_grep "^usage: deltafin COMMAND" "$t/err" || fail "no command: no usage on stderr"

# --- --version: version, revision, build, kernels, CUDA; from any command too
"$DF" --version >"$t/v"
expect_grep -E '^deltafin [0-9]+\.[0-9]+\.[0-9]+ \(' "$t/v"
expect_grep "kernels .*portable (this CPU: .*portable)" "$t/v"
expect_grep "CUDA: " "$t/v"
"$DF" run --version | cmp - "$t/v"

# --- bench passes the setting options it is given to every run it starts
quietly "$DF" bench -m "$m" --tokens "1 2 3" -n 2 --runs 1 -t 1 --json "$t/b.json"
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
expect_fail "unknown option --max-nwe" "$DF_ASAN" run -m "$m" --max-nwe 3
expect_no_grep Sanitizer "$t/asan.err"
echo PASS

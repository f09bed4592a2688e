#!/usr/bin/env bash
# What a user is told while and after a generation, and that it never mixes with the output:
#  - run stopped by the context limit (exit 0, fewer tokens than asked) and a chat answer cut by
#    --max-new say so; an error about a long text counts its tokens right; tokenize --chat reads
#    a pipe;
#  - on a terminal (tmux): the prompt's reading shows a status line that is erased, never left in
#    the text; on-demand expert fetches draw their progress without overwriting the generated
#    text and erase it; nothing of either reaches a stdout or stderr that is not a terminal.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/feedback"
mkdir -p "$t"
. "$(dirname "$0")/install_lib.sh"
m="$t/small"
"$DF" synth --preset small --seed 4 --out "$m" --quiet >/dev/null

# --- run at the context limit: exit 0, the tokens that fit, and a line saying why it stopped
K3_CONTEXT=8 "$DF" run --model "$m" --tokens "1 2 3" --max-new 20 >"$t/ctx.out" 2>"$t/ctx.err" || fail "context limit: exit $?"
[ "$(wc -w <"$t/ctx.out")" -eq 6 ] || fail "context limit: $(wc -w <"$t/ctx.out") tokens"
expect_grep "stopped at the context limit of 8 positions after 6 tokens of the 20 asked" "$t/ctx.err" ||
    fail "run stopped at the context limit silently"
# a generation that ends as asked says nothing more than the start-up line
"$DF" run --model "$m" --tokens "1 2 3" --max-new 5 >/dev/null 2>"$t/plain.err"
[ "$(wc -l <"$t/plain.err")" -eq 1 ] || fail "a plain run said more: $(cat "$t/plain.err")"
# run --chat cut by --max-new before the end of the answer
"$DF" run --model "$m" --prompt "Hello" --chat --max-new 3 >/dev/null 2>"$t/cut.err"
expect_grep "the answer was cut at -n/--max-new 3 tokens before it ended" "$t/cut.err"

# --- a text longer than the context is counted right (it used to say "0 tokens")
n=$(printf '%s' "The capital of France is" | "$DF" tokenize --model "$m" | wc -w)
expect_fail "the text is $n tokens, more than the context limit 5" \
    env K3_CONTEXT=5 "$DF" run --model "$m" --prompt "The capital of France is"

# --- tokenize --chat from a pipe (the reader used to trust fstat's size: 0 bytes)
printf '[{"role": "user", "content": "Hi there"}]' >"$t/chat.json"
"$DF" tokenize --model "$m" --chat "$t/chat.json" >"$t/want.ids"
[ -s "$t/want.ids" ] || fail "no ids"
cat "$t/chat.json" | "$DF" tokenize --model "$m" --chat /dev/stdin >"$t/p1.ids"
cat "$t/chat.json" | "$DF" tokenize --model "$m" --chat - >"$t/p2.ids"
"$DF" tokenize --model "$m" --chat <(cat "$t/chat.json") >"$t/p3.ids"
cmp "$t/want.ids" "$t/p1.ids" && cmp "$t/want.ids" "$t/p2.ids" && cmp "$t/want.ids" "$t/p3.ids"

# --- status lines never reach files or pipes
"$DF" synth --preset big --size-gb 0.3 --out "$t/big" --quiet >/dev/null
ids=$("$PYTHON" -c "import random; random.seed(3); print(' '.join(str(random.randrange(4000)) for _ in range(500)))")
K3_THREADS=1 "$DF" run --model "$t/big" --tokens "$ids" --max-new 8 >"$t/big.out" 2>"$t/big.err"
expect_no_grep "reading the prompt" "$t/big.err" "$t/big.out" || fail "a status line went to a file"
expect_no_grep $'\033' "$t/big.err" "$t/big.out" || fail "a terminal code went to a file"

# --- on a terminal: the prompt's progress shows while it is read, and is gone afterwards
sock="dffb$$"
tm() { tmux -L "$sock" "$@"; }
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; cleanup' EXIT
pane() { tm capture-pane -p -J -t fb -S -100; }
# A session that lives as long as the test keeps the tmux server up while panes are replaced (a
# server whose last session was killed exits, and one asked for at that moment fails to start).
tm new-session -d -s keep "sleep 3600"
run_in_pane() { # command: runs it in a fresh pane that stays after it exits
    tm kill-session -t fb 2>/dev/null || true
    tm new-session -d -s fb -x 220 -y 50 "$1; echo; echo DONE; sleep 600"
}
wait_pane() { # pattern, seconds
    for _ in $(seq $(($2 * 20))); do grep -q -- "$1" <<<"$(pane)" && return 0; sleep 0.05; done
    pane | tail -20
    fail "timed out waiting for '$1'"
}
# (windows of 64 rows: the 2-layer model reads each in a blink, so the line shows between windows)
run_in_pane "K3_THREADS=1 K3_PREFILL_WINDOW=64 '$DF' run --model '$t/big' --tokens '$ids' --max-new 8"
wait_pane "reading the prompt: [0-9]*/500 tokens, [0-9.]* tokens/s, .* left" 60
wait_pane DONE 120
pane >"$t/pane.txt"
expect_no_grep "reading the prompt" "$t/pane.txt" || fail "the prompt's status line was left on the screen"
expect_grep -xF "$(cat "$t/big.out")" "$t/pane.txt" || fail "the generated ids are not intact on the screen"

# --- on-demand expert fetches during a run on a streaming install: their progress is drawn
# (slow source: 300 ms per range), erased when done, and the ids on the screen are the ids
make_source "$t/src" small
start_faults "$SRC"
quietly "$DF" setup --stream --root "$t/inst"
cp -a --sparse=always "$t/inst" "$t/inst2"
stop_faults
export K3_FETCH_STALL_TIMEOUT=60 K3_FETCH_PARALLEL=2 # one slow server: no retries
FAULT_PORT=$PORT start_faults "$SRC" --delay-ms 300 # the install's own mirror (its recorded source), slow now
"$DF" run --model "$SRC" --tokens "5" --max-new 3 >"$t/od.want"
run_in_pane "K3_HF_HOST=$K3_HF_HOST K3_FETCH_STALL_TIMEOUT=60 K3_FETCH_PARALLEL=2 '$DF' run --model '$t/inst' --tokens '5' --max-new 3"
wait_pane "fetching [0-9]* experts\? of layer" 120
wait_pane DONE 300
pane >"$t/od.pane"
expect_no_grep "fetching\|ETA\|took" "$t/od.pane" || fail "fetch progress was left on the screen"
got=$(sed -n '/^streaming install/,/^DONE$/p' "$t/od.pane" | sed 1d | sed "/^deltafin:\|^DONE/d" | tr -s ' \n' ' ' |
    sed 's/^ //; s/ $//')
[ "$got" = "$(cat "$t/od.want")" ] || fail "the ids on the screen ($got) differ from the source's ($(cat "$t/od.want"))"
# the same run with stderr in a file: plain progress lines there, none in the output
"$DF" run --model "$t/inst2" --tokens "5" --max-new 3 >"$t/od2.out" 2>"$t/od2.err"
cmp "$t/od2.out" "$t/od.want"
expect_grep "fetching [0-9]* experts\? of layer [0-9]*: .* took [0-9.]* s$" "$t/od2.err" || fail "no plain fetch lines"
expect_no_grep $'\033\|\r' "$t/od2.err" || fail "terminal codes in a file"
echo PASS

#!/usr/bin/env bash
# deltafin chat in a real terminal (tmux): two turns where the second feeds only the new tokens
# (the first turn's prompt and answer are not prefilled again: counts from --stats against
# `deltafin tokenize`), Ctrl-C stopping a long answer, back at the prompt with the state kept, and
# Ctrl-C while a long message is still being read: kept, and continued by the next turn. Then
# line editing: a pasted block of lines is one message, arrows edit the line and recall the
# history (kept across sessions in XDG_STATE_HOME), Ctrl-C discards a line, /help and /reset
# answer, an unknown /command is not sent; /save in one session and /load in another resume the
# conversation without reading it again, and the answer is that of the session that never
# stopped; /load refuses another model's file.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/chat_tmux"
mkdir -p "$t"
m="$t/tiny"
"$DF" synth --preset tiny --seed 4 --out "$m" --quiet >/dev/null
sock="dfchat$$"
export XDG_STATE_HOME="$t/state" LANG=C.UTF-8
tm() { tmux -L "$sock" "$@"; }
trap 'tmux -L "$sock" kill-server 2>/dev/null || true' EXIT

wait_for() { # file-or-pane, pattern, seconds
    local what="$1" pat="$2" limit="${3:-60}" i=0
    while :; do
        if [ "$what" = pane ]; then grep -q -- "$pat" <<<"$(tm capture-pane -p -t chat -S -200)" && return 0
        else grep -q -- "$pat" "$what" 2>/dev/null && return 0; fi
        i=$((i + 1))
        if [ $i -gt $((limit * 10)) ]; then
            echo "timed out waiting for '$pat' in $what"; tm capture-pane -p -t chat -S -50 || true; cat "$t"/stats.* || true
            exit 1
        fi
        sleep 0.1
    done
}
session_ends() { # the chat in the tmux session has exited (within 5 s)
    for i in $(seq 50); do tm has-session -t chat 2>/dev/null || return 0; sleep 0.1; done
    echo "chat did not end"
    exit 1
}
count_chat() { # messages JSON, extra flags -> number of tokens
    printf '%s' "$1" >"$t/req.json"
    shift
    "$DF" tokenize --model "$m" --chat "$t/req.json" "$@" | wc -w
}
field() { sed -n "s/.*turn $2: prompt \([0-9]*\) tokens, fed \([0-9]*\) (reused \([0-9]*\).*generated \([0-9]*\) tokens.*/\\$3/p" "$1"; }

# --- two turns: the second turn feeds only what is new
u1="What is the tallest mountain?" u2="And the second tallest?"
tm new-session -d -s chat -x 160 -y 40 "'$DF' chat --model '$m' --max-new 6 --stats 2>'$t/stats.1'"
wait_for pane "^>" 30
tm send-keys -t chat "$u1" Enter
wait_for "$t/stats.1" "turn 1:"
tm send-keys -t chat "$u2" Enter
wait_for "$t/stats.1" "turn 2:"
wait_for pane "(still thinking after 6 tokens, .*) \[--max-new 6 reached\]"
tm send-keys -t chat C-d
cat "$t/stats.1"
p1=$(field "$t/stats.1" 1 1) f1=$(field "$t/stats.1" 1 2) g1=$(field "$t/stats.1" 1 4)
p2=$(field "$t/stats.1" 2 1) f2=$(field "$t/stats.1" 2 2) r2=$(field "$t/stats.1" 2 3)
want1=$(count_chat "[{\"role\":\"user\",\"content\":\"$u1\"}]")
[ "$p1" -eq "$want1" ] && [ "$f1" -eq "$p1" ] || { echo "turn 1: prompt $p1 fed $f1, expected $want1"; exit 1; }
# the State held turn 1's prompt and all but the last shown token of its answer
if grep -q "turn 1:.*end marker" "$t/stats.1"; then held=$((p1 + g1)); else held=$((p1 + g1 - 1)); fi
[ "$r2" -eq "$held" ] || { echo "turn 2 reused $r2, expected $held"; exit 1; }
[ "$f2" -eq $((p2 - r2)) ] && [ "$f2" -lt "$p1" ] || { echo "turn 2 fed $f2 of $p2"; exit 1; }
# what was fed: the last token and closing markers of answer 1, then the new user message and
# the generation prompt (the rendering of [u1, u2] minus the rendering of [u1])
both=$(count_chat "[{\"role\":\"user\",\"content\":\"$u1\"},{\"role\":\"user\",\"content\":\"$u2\"}]")
first=$(count_chat "[{\"role\":\"user\",\"content\":\"$u1\"}]" --no-generation-prompt)
close_think=$(printf '%s' '<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>' |
    "$DF" tokenize --model "$m" --special | wc -w)
close_resp=$(printf '%s' '<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>' | "$DF" tokenize --model "$m" --special | wc -w)
new=$((both - first))
[ "$f2" -eq $((1 + close_think + new)) ] || [ "$f2" -eq $((1 + close_resp + new)) ] ||
    { echo "turn 2 fed $f2; expected 1 + ($close_think or $close_resp) + $new"; exit 1; }

# --- Ctrl-C: on the small model (larger vocabulary: longer random answers), pick a question
# whose answer runs past 1500 tokens according to `run`, and stop it early
m="$t/small"
"$DF" synth --preset small --seed 1 --out "$m" --quiet >/dev/null
eom=$(printf '%s' '<|end_of_msg|>' | "$DF" tokenize --model "$m" --special)
long=""
for q in "Write an essay about rivers." "Tell me a long story." "Describe the sea." "List every prime number."; do
    count_chat "[{\"role\":\"user\",\"content\":\"$q\"}]" >/dev/null
    ids=$("$DF" tokenize --model "$m" --chat "$t/req.json")
    out=$("$DF" run --model "$m" --tokens "$ids" --max-new 1500 2>"$t/long.err") || { cat "$t/long.err"; fail "run ($q)"; }
    if ! grep -qw -- "$eom" <<<"$out"; then long="$q"; break; fi
done
[ -n "$long" ] || { echo "no question with a long answer on this model"; exit 1; }
tm kill-session -t chat 2>/dev/null || true
tm new-session -d -s chat -x 160 -y 40 "'$DF' chat --model '$m' --stats 2>'$t/stats.2'"
wait_for pane "^>" 30
tm send-keys -t chat "$long" Enter
wait_for pane "thinking: [0-9]* tokens, [0-9.]* s" # the live count (stderr is a file: on stdout)
tm send-keys -t chat C-c
wait_for "$t/stats.2" "turn 1:"
wait_for pane "\[stopped\]"
g=$(field "$t/stats.2" 1 4)
[ "$g" -lt 1500 ] || { echo "Ctrl-C did not stop the answer ($g tokens)"; exit 1; }
tm send-keys -t chat "Thanks." Enter
wait_for "$t/stats.2" "turn 2:"
cat "$t/stats.2"
pl=$(field "$t/stats.2" 1 1) r=$(field "$t/stats.2" 2 3)
[ "$r" -eq $((pl + g - 1)) ] || { echo "after Ctrl-C the next turn reused $r, expected $((pl + g - 1))"; exit 1; }
tm send-keys -t chat "/exit" Enter
session_ends

# --- Ctrl-C while the model is still reading a long message: the message stays in the
# conversation and the State keeps what it read, so the next turn feeds only the rest (counts
# from --stats), and its answer is exactly that of a fresh rendering of the history [long
# message, next message] (`tokenize --chat`, then `run`). stdout goes to a file (plain text);
# the keys, Ctrl-C included, still come through the terminal.
long=$("$PYTHON" -c "import random; random.seed(7); w='river mountain stone water sky forest quiet light'.split(); print(' '.join(random.choice(w) for _ in range(600))[:3900])")
markers=$(printf '%s' '<|open|><|close|><|sep|><|end_of_msg|>' | "$DF" tokenize --model "$m" --special)
bos=$("$DF" inspect "$m" | sed -n 's/.*(bos \([0-9]*\),.*/\1/p')
n_new=12 u2=""
for q in "Thanks." "Go on." "Why?" "And then?"; do
    "$PYTHON" -c 'import json, sys; json.dump([{"role": "user", "content": sys.argv[1]}, {"role": "user", "content": sys.argv[2]}], open(sys.argv[3], "w"))' \
        "$long" "$q" "$t/hist.json"
    hist=$("$DF" tokenize --model "$m" --chat "$t/hist.json")
    ref=$("$DF" run --model "$m" --tokens "$hist" --max-new $n_new 2>"$t/ref.err") || { cat "$t/ref.err"; fail "run ($q)"; }
    # no structural marker in the answer: the chat shows every non-special token's text as thinking
    if ! grep -qxF "$(printf '%s\n' $markers)" <<<"$(printf '%s\n' $ref)"; then u2="$q"; break; fi
done
[ -n "$u2" ] || { echo "no second message with a marker-free answer"; exit 1; }
printf '%s\n' $ref | awk -v b="$bos" '$1 < b' | "$DF" detokenize --model "$m" >"$t/want.answer"
tm kill-session -t chat 2>/dev/null || true
# Ctrl-C stops the prefill window in progress (undone: the State as before it) and keeps the ones
# before it: windows of 256 rows put several in this prompt, and turn 2 must answer as if uninterrupted
tm new-session -d -s chat -x 160 -y 40 \
    "exec env K3_THREADS=1 K3_PREFILL_WINDOW=256 '$DF' chat --model '$m' --max-new $n_new --show-thinking --stats >'$t/out.3' 2>'$t/stats.3'"
wait_for "$t/out.3" "^>" 30
pid=$(tm display -p -t chat '#{pane_pid}')
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
c0=$(cpu)
tm send-keys -t chat -l "$long"
tm send-keys -t chat Enter
for i in $(seq 300); do [ $(($(cpu) - c0)) -ge 20 ] && break; sleep 0.02; done # 0.2 s of CPU: reading
tm send-keys -t chat C-c
wait_for "$t/stats.3" "turn 1:"
tm send-keys -t chat "$u2" Enter
wait_for "$t/stats.3" "turn 2:"
tm send-keys -t chat "/exit" Enter
session_ends
cat "$t/stats.3"
p1=$(field "$t/stats.3" 1 1) f1=$(field "$t/stats.3" 1 2)
p2=$(field "$t/stats.3" 2 1) f2=$(field "$t/stats.3" 2 2) r2=$(field "$t/stats.3" 2 3)
grep -q "turn 1:.*stopped while reading the prompt" "$t/stats.3" && [ "$f1" -gt 0 ] && [ "$f1" -lt "$p1" ] ||
    { echo "Ctrl-C did not land while the prompt was read (fed $f1 of $p1)"; exit 1; }
[ "$p2" -eq "$(echo $hist | wc -w)" ] || { echo "turn 2's prompt has $p2 tokens, the history renders to $(echo $hist | wc -w)"; exit 1; }
[ "$r2" -eq "$f1" ] && [ "$f2" -eq $((p2 - f1)) ] || { echo "turn 2 reused $r2 and fed $f2; expected $f1 and $((p2 - f1))"; exit 1; }
"$PYTHON" - "$t/out.3" "$t/want.answer" <<'PY'
import sys
got, answer = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
want = b">  [stopped]\n> " + answer + b" [--max-new 12 reached]\n> \n"
assert got == want, (got, want)
PY

# --- line editing: a paste of three lines is one message; arrows edit; Ctrl-C drops a line;
# the history is kept across sessions
m="$t/tiny"
pasted=$'line one\nline two\nline three'
tm kill-session -t chat 2>/dev/null || true
# (the sanitizer build: libedit's path runs under ASan/UBSan too)
tm new-session -d -s chat -x 160 -y 40 "exec '$DF_ASAN' chat --model '$m' --max-new 4 --stats 2>'$t/stats.4'"
wait_for pane "^>" 30
tm send-keys -t chat "never sent" C-c
tm set-buffer -b paste "$pasted"
tm paste-buffer -p -b paste -t chat
tm send-keys -t chat Enter
wait_for "$t/stats.4" "turn 1:"
tm send-keys -t chat "abc" Left Left "X" End "d" Enter   # "aXbcd"
wait_for "$t/stats.4" "turn 2:"
tm send-keys -t chat "/help" Enter
wait_for pane "/save FILE"
tm send-keys -t chat "/sav" Enter
wait_for pane "unknown command /sav: did you mean /save?"
tm send-keys -t chat "/save $t/s1.chat" Enter
wait_for pane "(saved 4 messages, [0-9]* tokens of model state, to $t/s1.chat)"
tm send-keys -t chat "/reset" Enter
wait_for pane "(a new conversation"
tm send-keys -t chat "/exit" Enter
session_ends
cat "$t/stats.4"
[ "$(grep -c '^stats: turn' "$t/stats.4")" -eq 2 ] || { echo "expected 2 turns (paste = 1, no /command sent)"; exit 1; }
expect_no_grep Sanitizer "$t/stats.4"
p1=$(field "$t/stats.4" 1 1)
want=$(count_chat "$("$PYTHON" -c 'import json, sys; print(json.dumps([{"role": "user", "content": sys.argv[1]}]))' "$pasted")")
[ "$p1" -eq "$want" ] || { echo "the pasted message rendered to $p1 tokens, as one message $want"; exit 1; }
# the saved conversation holds the messages as typed
"$PYTHON" - "$t/s1.chat" "$pasted" <<'PY'
import json, sys
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"DFCHAT1\n", d[:8]
conv, _ = json.JSONDecoder().raw_decode(d[160:].decode("utf-8", "replace"))
users = [m["content"] for m in conv["messages"] if m["role"] == "user"]
assert users == [sys.argv[2], "aXbcd"], users
PY
expect_grep '^line\\040one\\012line\\040two\\012line\\040three$' "$t/state/deltafin/chat_history"
expect_no_grep "never sent" "$t/state/deltafin/chat_history" || fail "a discarded line reached the history"
# a new session recalls the history with the arrows: Up Up is the pasted message
tm new-session -d -s chat -x 160 -y 40 "exec '$DF' chat --model '$m' --max-new 4 --stats 2>'$t/stats.5'"
wait_for pane "^>" 30
# newest first: /exit, /reset, /save ..., /sav, /help, aXbcd, the paste
tm send-keys -t chat Up Up Up Up Up Up Up Enter
wait_for "$t/stats.5" "turn 1:" 30
tm send-keys -t chat "/exit" Enter
[ "$(field "$t/stats.5" 1 1)" -eq "$want" ] || { echo "history recall: $(cat "$t/stats.5")"; exit 1; }

# --- /save in one session, /load in another: nothing read again, the same answer as a session
# that never stopped (that one through a pipe), and another model's file is refused
m="$t/small"
q1="Tell me about rivers." q2="And lakes?" q3="Which is deeper?"
printf '%s\n%s\n%s\n' "$q1" "$q2" "$q3" | "$DF" chat --model "$m" --max-new 8 --stats --show-thinking >"$t/ref.out" 2>"$t/ref.err"
tm kill-session -t chat 2>/dev/null || true
tm new-session -d -s chat -x 160 -y 40 "exec '$DF' chat --model '$m' --max-new 8 --stats --show-thinking 2>'$t/stats.6'"
wait_for pane "^>" 30
tm send-keys -t chat "$q1" Enter
wait_for "$t/stats.6" "turn 1:"
tm send-keys -t chat "$q2" Enter
wait_for "$t/stats.6" "turn 2:"
tm send-keys -t chat "/save $t/s2.chat" Enter
wait_for pane "(saved 4 messages"
tm send-keys -t chat "/exit" Enter
session_ends
tm new-session -d -s chat -x 160 -y 40 \
    "exec '$DF' chat --model '$m' --max-new 8 --stats --show-thinking >'$t/out.7' 2>'$t/stats.7'"
wait_for "$t/out.7" "^>" 30
tm send-keys -t chat "/load $t/s2.chat" Enter
wait_for "$t/out.7" "(loaded 4 messages"
tm send-keys -t chat "$q3" Enter
wait_for "$t/stats.7" "turn 3:"
tm send-keys -t chat "/exit" Enter
session_ends
cat "$t/stats.7"
# turn 3 fed exactly what the uninterrupted session fed: the history was not read again
ref3=$(grep "turn 3:" "$t/ref.err" | sed 's/ in [0-9.]* s//; s/, [0-9.]* s\/token//')
got3=$(grep "turn 3:" "$t/stats.7" | sed 's/ in [0-9.]* s//; s/, [0-9.]* s\/token//')
[ -n "$ref3" ] && [ "$got3" = "$ref3" ] || { echo "turn 3 after /load: '$got3', uninterrupted: '$ref3'"; exit 1; }
# and answered the same
[ "$(sed -n 2p "$t/out.7")" = "$(sed -n 3p "$t/ref.out")" ] ||
    { echo "answer after /load differs:"; cat "$t/out.7"; echo ---; cat "$t/ref.out"; exit 1; }
# another model's file is refused, and the conversation is unchanged
printf '/load %s\n' "$t/s2.chat" | "$DF" chat --model "$t/tiny" 2>"$t/other.err" >/dev/null
expect_grep "load: $t/s2.chat was saved with another model" "$t/other.err"

# --- the sanitizer build over a pipe: turns, /reset, a system message, shown thinking
printf 'hello\nand again\n/reset\nfresh start\n' |
    "$DF_ASAN" chat --model "$t/tiny" --max-new 5 --stats --show-thinking --system "Be brief." >"$t/asan.out" 2>"$t/asan.err"
cat "$t/asan.err"
grep "^stats: turn" "$t/asan.err" >"$t/asan.turns"
expect_eq 3 "$(wc -l <"$t/asan.turns")" "turns in the sanitizer build's chat"
sed -n 2p "$t/asan.turns" | expect_grep "turn 2:.*(reused [1-9]"   # the second turn continued the first
sed -n 3p "$t/asan.turns" | expect_grep "turn 1:.*(reused 0 "      # /reset started over
expect_no_grep Sanitizer "$t/asan.err"
echo PASS

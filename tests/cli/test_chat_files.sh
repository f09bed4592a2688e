#!/usr/bin/env bash
# Chat save files as hostile input (its SHA-256 is a checksum anyone can recompute): a named pipe
# is refused at once by chat --load and /load, never waited on; a crafted turn count is refused
# (the ASan build shows no overflow); a conversation that is not valid UTF-8 is named as such;
# an answer that is a tool call is saved with its call and loads again.
set -euo pipefail
t="$DF_TEST_TMP/chat_files"
rm -rf "$t"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
m="$t/m"
"$DF" synth --preset tiny --seed 3 --out "$m" --quiet
printf 'hello there\n/save %s\n' "$t/good.chat" | "$DF" chat -m "$m" -n 4 -q >"$t/save.out"
grep -q "(saved 2 messages" "$t/save.out" || fail "save: $(cat "$t/save.out")"

# expect_load STATUS TEXT BINARY FILE: chat --load exits with STATUS, saying TEXT, without a sanitizer report
expect_load() {
    local want="$1" text="$2" bin="$3" file="$4" rc=0
    printf 'hi\n' | timeout 60 "$bin" chat -m "$m" -n 2 -q --load "$file" >"$t/out" 2>"$t/err" || rc=$?
    [ "$rc" -eq "$want" ] || fail "chat --load $file: exit $rc, wanted $want: $(cat "$t/err")"
    [ -z "$text" ] || grep -qF -- "$text" "$t/err" || fail "chat --load $file does not say '$text': $(cat "$t/err")"
    if grep -q "runtime error\|AddressSanitizer" "$t/err"; then fail "$bin: a sanitizer report: $(cat "$t/err")"; fi
}

# --- a FIFO: refused at once (no writer ever comes), by --load and by /load
mkfifo "$t/fifo"
expect_load 1 "$t/fifo is not a regular file" "$DF" "$t/fifo"
rc=0
printf '/load %s\n/exit\n' "$t/fifo" | timeout 60 "$DF" chat -m "$m" -q >"$t/out" 2>"$t/err" || rc=$?
[ "$rc" -eq 0 ] && grep -qF "load: $t/fifo is not a regular file" "$t/err" || fail "/load FIFO: exit $rc: $(cat "$t/err")"

# craft.py IN OUT OFFSET HEXBYTES: bytes replaced at OFFSET (negative: from the JSON's start),
# then the trailing SHA-256 recomputed, as anyone can
cat >"$t/craft.py" <<'EOF'
import hashlib, struct, sys
data = bytearray(open(sys.argv[1], "rb").read()[:-32])
at, new = int(sys.argv[3]), bytes.fromhex(sys.argv[4])
if at < 0:  # inside the conversation's JSON: the first occurrence of the text "hello"
    at = 160 + data[160:].index(b"hello") + (-at - 1)
data[at:at + len(new)] = new
open(sys.argv[2], "wb").write(bytes(data) + hashlib.sha256(data).digest())
EOF
# the turn count (header bytes 116..119, little-endian) at its largest
"$PYTHON" "$t/craft.py" "$t/good.chat" "$t/turn.chat" 116 ffffff7f
expect_load 1 "a turn count of 2147483647 is out of range" "$DF" "$t/turn.chat"
expect_load 1 "a turn count of 2147483647 is out of range" "$DF_ASAN" "$t/turn.chat"
"$PYTHON" "$t/craft.py" "$t/good.chat" "$t/turn2.chat" 116 ffffffff
expect_load 1 "a turn count of 4294967295 is out of range" "$DF_ASAN" "$t/turn2.chat"
# invalid UTF-8 inside the conversation
"$PYTHON" "$t/craft.py" "$t/good.chat" "$t/utf8.chat" -1 ff
expect_load 1 "the conversation is not valid JSON: unable to decode byte 0xff" "$DF" "$t/utf8.chat"
# the untouched file still loads (the crafting itself is right)
expect_load 0 "" "$DF_ASAN" "$t/good.chat"
grep -q "(loaded 2 messages" "$t/out" || fail "the good file: $(cat "$t/out")"

# --- a tool call is kept in the conversation, saved and loaded
b="$root/models/k3-mini"
printf 'What is 2+2?\n/save %s\n' "$t/call.chat" | "$DF" chat -m "$b" -n 300 -q >"$t/call.out"
grep -q "\[tool call\] calculate" "$t/call.out" || fail "no tool call: $(cat "$t/call.out")"
grep -qa '"tool_calls":\[{"type":"function","function":{"name":"calculate"' "$t/call.chat" || fail "the call is not saved"
printf '/exit\n' | "$DF" chat -m "$b" -q --load "$t/call.chat" >"$t/load.out"
grep -q "(loaded 2 messages" "$t/load.out" || fail "loading the call: $(cat "$t/load.out")"
echo PASS

#!/usr/bin/env bash
# deltafin tokenize / detokenize as a user runs them: round trips, detokenize checked against
# Python decoding the token bytes straight from tiktoken.model, --chat, and the error messages
# for bad input. The sanitizer build runs the same commands.
source "$(dirname "$0")/../lib.sh"
T="$DF_TEST_TMP/tokenizer-cli"
rm -rf "$T" && mkdir -p "$T"

"$DF" synth --preset tiny --out "$T/m" --quiet >/dev/null

# Python's independent decoder: token bytes from tiktoken.model, joined, decode("utf-8", "replace").
py_decode() {
    "$PYTHON" -c '
import base64, json, sys
d = sys.argv[1]
ranks = [base64.b64decode(l.split()[0]) for l in open(d + "/tiktoken.model")]
cfg = json.load(open(d + "/tokenizer_config.json"))["added_tokens_decoder"]
spell = lambda i: cfg[str(i)]["content"].encode() if str(i) in cfg else b"<|reserved_token_%d|>" % i
ids = [int(x) for x in sys.stdin.read().split()]
sys.stdout.buffer.write(b"".join(ranks[i] if i < len(ranks) else spell(i) for i in ids).decode("utf-8", "replace").encode())
' "$1"
}

for BIN in "$DF" "$DF_ASAN"; do
    printf 'Hello, world!\n\tIndented  twice\r\nemoji \xf0\x9f\x98\x80 and \xe4\xb8\xad\xe6\x96\x87 and caf\xc3\xa9.' > "$T/in.txt"
    "$BIN" tokenize --model "$T/m" < "$T/in.txt" > "$T/ids.txt"
    [ "$(wc -l < "$T/ids.txt")" -eq 1 ] || fail "tokenize must print one line"
    "$BIN" detokenize --model "$T/m" < "$T/ids.txt" > "$T/out.txt"
    cmp -s "$T/in.txt" "$T/out.txt" || fail "$BIN: detokenize(tokenize(x)) != x"

    # invalid UTF-8 in: the ids are those of its U+FFFD replacement (Python's decode)
    printf 'ab\xff\xe2\x82 cd\xed\xa0\x80' > "$T/bad.txt"
    "$PYTHON" -c 'import sys; sys.stdout.buffer.write(open(sys.argv[1],"rb").read().decode("utf-8","replace").encode())' "$T/bad.txt" > "$T/bad_replaced.txt"
    [ "$("$BIN" tokenize --model "$T/m" < "$T/bad.txt")" = "$("$BIN" tokenize --model "$T/m" < "$T/bad_replaced.txt")" ] \
        || fail "invalid UTF-8 must encode as its replacement"

    # detokenize of arbitrary ids (byte tokens splitting characters, specials) equals Python's
    echo "104 105 226 130 32 255 259 195 169 767 515 195" > "$T/raw_ids.txt"
    "$BIN" detokenize --model "$T/m" < "$T/raw_ids.txt" > "$T/dt.txt"
    py_decode "$T/m" < "$T/raw_ids.txt" > "$T/py.txt"
    cmp -s "$T/dt.txt" "$T/py.txt" || fail "$BIN: detokenize differs from Python: $(od -c "$T/dt.txt" | head -3)"

    # --special makes special spellings special ids; without it they are text
    open_id=$("$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1]))["added_tokens_decoder"]; print([k for k,v in d.items() if v["content"]=="<|open|>"][0])' "$T/m/tokenizer_config.json")
    [ "$(printf '<|open|>' | "$BIN" tokenize --model "$T/m" --special)" = "$open_id" ] || fail "--special"
    printf '<|open|>' | "$BIN" tokenize --model "$T/m" >"$T/text_ids.txt"
    expect_no_grep -w "$open_id" "$T/text_ids.txt" || fail "untrusted text produced a special id"

    # --chat renders K3's format; --text shows it
    printf '[{"role": "user", "content": "Hi <|open|>"}]' > "$T/chat.json"
    "$BIN" tokenize --model "$T/m" --chat "$T/chat.json" --text > "$T/chat.txt"
    expect_grep '<|open|>message role="user"<|sep|>Hi <|open|><|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>$' "$T/chat.txt" \
        || fail "chat text"
    n_open=$("$BIN" tokenize --model "$T/m" --chat "$T/chat.json" | tr ' ' '\n' | { grep -cx "$open_id" || true; })
    [ "$n_open" -eq 4 ] || fail "chat: expected 4 <|open|> ids, got $n_open"
done

# errors: one line, naming what is wrong
expect_error() { # pattern, command...
    local pattern="$1"; shift
    local rc=0
    "$@" > "$T/err.out" 2> "$T/err.txt" || rc=$?
    [ "$rc" -ge 1 ] && [ "$rc" -le 123 ] || fail "expected a failure (status 1..123), got status $rc: $*"
    expect_grep -- "$pattern" "$T/err.txt"
    [ "$(wc -l < "$T/err.txt")" -eq 1 ] || fail "error must be one line: $(cat "$T/err.txt")"
}
[ "$(cd "$T/m" && DELTAFIN_ROOT= "$DF" tokenize -m . < "$T/in.txt")" = "$(cat "$T/ids.txt")" ] || fail "-m ."
mkdir -p "$T/xdg" && cp -r "$T/m" "$T/xdg/deltafin"
[ "$(env -C "$T" XDG_CACHE_HOME="$T/xdg" DELTAFIN_ROOT= "$DF" tokenize < "$T/in.txt")" = "$(cat "$T/ids.txt")" ] ||
    fail "the model dir defaults to the install in XDG_CACHE_HOME/deltafin"
[ "$(DELTAFIN_ROOT="$T/m" "$DF" tokenize < "$T/in.txt")" = "$(cat "$T/ids.txt")" ] || fail "model dir from DELTAFIN_ROOT"
expect_error "deltafin: $T/none (--model): no such directory" "$DF" tokenize --model "$T/none" < /dev/null
mkdir -p "$T/empty"
expect_error "deltafin: $T/empty (DELTAFIN_ROOT) has no tiktoken.model" env DELTAFIN_ROOT="$T/empty" "$DF" detokenize < /dev/null
echo "1 2 x3" | expect_error "deltafin: stdin: token 2: expected a decimal token id" "$DF" detokenize --model "$T/m"
echo "1 99999" | expect_error "deltafin: stdin: token 1: id 99999 is outside the vocabulary (0..767)" "$DF" detokenize --model "$T/m"
printf '[{"role": "user", "content": "x"}' > "$T/broken.json"
expect_error "deltafin: $T/broken.json:1: invalid JSON" "$DF" tokenize --model "$T/m" --chat "$T/broken.json"
expect_error "deltafin: tokenize: --effort: 'medium' is not low, high or max" "$DF" tokenize --model "$T/m" --chat "$T/chat.json" --effort medium
printf '"a"\n3\n' | expect_error "deltafin: stdin:2: expected a JSON string per line" "$DF" tokenize --model "$T/m" --jsonl
echo "tokenizer CLI: ok"

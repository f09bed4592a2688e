#!/usr/bin/env bash
# The training-data tools on fixtures (tools/corpus/README.md): the corpus parsers' unit tests,
# train_bpe writing a K3 vocabulary the engine loads, and encode_data's documents and chats
# checked against `deltafin tokenize` (the same ids), an independent Python decoder (ids -> the
# rendered text) and the loss mask (exactly the assistant's generated tokens). The sanitizer
# builds of the tools run the same inputs and must write the same bytes.
source "$(dirname "$0")/../lib.sh"
T="$DF_TEST_TMP/corpus"
rm -rf "$T" && mkdir -p "$T"
FIX=tests/corpus/fixtures

"$PYTHON" tests/corpus/test_corpus.py

# a small corpus: English sentences and the fixtures' text
"$PYTHON" - "$T/docs.jsonl" <<'PY'
import json, sys, glob
docs = [open(p, encoding="utf-8").read() for p in sorted(glob.glob("tests/corpus/fixtures/*"))]
docs += ["The lighthouse keeper walked along the shore every evening, watching the ships come in."] * 20
with open(sys.argv[1], "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
PY
for bin in build build-asan; do
    "$bin/tools/tokenizer/train_bpe" --docs "$T/docs.jsonl" --out "$T/tok-$bin" --mergeable 400 2>"$T/train_bpe.err" || { cat "$T/train_bpe.err"; fail "$bin: train_bpe"; }
done
cmp "$T/tok-build/tiktoken.model" "$T/tok-build-asan/tiktoken.model" || fail "train_bpe differs under ASan"
TOK="$T/tok-build"
[ "$(wc -l < "$TOK/tiktoken.model")" -eq 400 ] || fail "expected 400 ranks"
eom=$("$DF" tokenize --model "$TOK" --special <<< '<|end_of_msg|>' | cut -d' ' -f1)
[ "$eom" = 402 ] || fail "<|end_of_msg|> is $eom, expected 402 (n_mergeable + 2)"
[ "$(printf ' lighthouse' | "$DF" tokenize --model "$TOK" | wc -w)" -le 2 ] || fail "' lighthouse' was not learned"
expect_fail "must be 257..65280" "$bin/tools/tokenizer/train_bpe" --docs "$T/docs.jsonl" --out "$T/x" --mergeable 100000

# documents: each one's ids then [EOS], the same ids `deltafin tokenize` gives
printf '%s\n' '{"text": "First document."}' '{"text": "Second one, <|open|> as text."}' > "$T/two.jsonl"
build/tools/corpus/encode_data docs --tokenizer "$TOK" --in "$T/two.jsonl" --out "$T/two.bin" > "$T/two.stats"
want="$(printf 'First document.' | "$DF" tokenize --model "$TOK") 401 $(printf 'Second one, <|open|> as text.' | "$DF" tokenize --model "$TOK") 401"
got=$("$PYTHON" -c 'import sys, numpy; print(*numpy.fromfile(sys.argv[1], "<u2"))' "$T/two.bin")
[ "$got" = "$want" ] || fail "docs: got $got, want $want"
expect_grep '"documents": 2' "$T/two.stats"

# chats: rendered by the engine, checked conversation by conversation
for bin in build build-asan; do
    "$bin/tools/corpus/encode_data" chats --tokenizer "$TOK" --in "$FIX/chats.jsonl" --out "$T/c-$bin.bin" \
        --mask "$T/c-$bin.mask" > "$T/c-$bin.stats"
done
cmp "$T/c-build.bin" "$T/c-build-asan.bin" && cmp "$T/c-build.mask" "$T/c-build-asan.mask" || fail "ASan build differs"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    printf '%s' "$line" > "$T/conv$n.json"
    "$DF" tokenize --model "$TOK" --chat "$T/conv$n.json" --no-generation-prompt > "$T/conv$n.ids"
    "$DF" tokenize --model "$TOK" --chat "$T/conv$n.json" --no-generation-prompt --text > "$T/conv$n.txt"
done < "$FIX/chats.jsonl"
"$PYTHON" - "$TOK" "$T" "$FIX/chats.jsonl" <<'PY'
import base64, json, sys
import numpy as np
tok, t, chats = sys.argv[1:]
ranks = [base64.b64decode(l.split()[0]) for l in open(tok + "/tiktoken.model")]
spell = {int(k): v["content"].encode() for k, v in json.load(open(tok + "/tokenizer_config.json"))["added_tokens_decoder"].items()}
decode = lambda ids: b"".join(ranks[i] if i < len(ranks) else spell[i] for i in ids).decode()
ids, mask = np.fromfile(t + "/c-build.bin", "<u2"), np.fromfile(t + "/c-build.mask", "u1")
assert len(ids) == len(mask)
eos = len(ranks) + 1
ends = [i for i, x in enumerate(ids) if x == eos]
assert len(ends) == 3, ends
start = 0
for n, (end, line) in enumerate(zip(ends, open(chats)), 1):
    conv, m = ids[start:end].tolist(), mask[start:end]
    assert mask[end] == 0
    want = [int(x) for x in open(f"{t}/conv{n}.ids").read().split()]
    assert conv == want, f"conversation {n}: ids differ from deltafin tokenize --chat"
    assert decode(conv) == open(f"{t}/conv{n}.txt", encoding="utf-8").read(), f"conversation {n}: text differs"
    # the masked spans are exactly what the model generates after each assistant prompt
    spans, i = [], 0
    while i < len(m):
        if m[i]:
            j = i
            while j < len(m) and m[j]:
                j += 1
            spans.append(decode(conv[i:j]))
            i = j
        else:
            i += 1
    msgs = [x for x in json.loads(line)["messages"] if x["role"] == "assistant"]
    assert len(spans) == len(msgs), (n, spans)
    for span, msg in zip(spans, msgs):
        tools = ""
        for k, c in enumerate(msg.get("tool_calls") or []):
            args = "".join(f'<|open|>argument key="{a}" type="string"<|sep|>{v}<|close|>argument<|sep|>'
                           for a, v in json.loads(c["function"]["arguments"]).items())
            tools += f'<|open|>call tool="{c["function"]["name"]}" index="{k + 1}"<|sep|>{args}<|close|>call<|sep|>'
        if tools:
            tools = "<|open|>tools<|sep|>" + tools + "<|close|>tools<|sep|>"
        expect = (msg["reasoning_content"] + "<|close|>think<|sep|><|open|>response<|sep|>" + msg["content"] +
                  "<|close|>response<|sep|>" + tools + "<|close|>message<|sep|><|end_of_msg|>")
        assert span == expect, f"conversation {n}: masked {span!r}, expected {expect!r}"
    start = end + 1
stats = json.load(open(t + "/c-build.stats"))
assert stats["conversations"] == 3 and stats["tokens"] == len(ids) and stats["assistant_tokens"] == int(mask.sum())
PY

# a broken conversation is refused with its line named
printf '%s\n' '{"messages": [{"role": "user", "content": "ok"}]}' '{"messages": [{"role": "robot"}]}' > "$T/bad.jsonl"
expect_fail "bad.jsonl:2: messages\[0\]" \
    build/tools/corpus/encode_data chats --tokenizer "$TOK" --in "$T/bad.jsonl" --out "$T/b.bin" --mask "$T/b.mask"
[ ! -e "$T/b.bin" ] || fail "output written despite the error"
echo "corpus tools: ok"

#!/usr/bin/env bash
# The model shipped in models/k3-mini: every file its SHA256SUMS lists is intact and every file the
# engine reads is listed; `deltafin inspect` validates it; on a fixed paragraph (64 tokens or more) the C
# engine's logits equal PyTorch's within the project's bound (1e-4 x max(1, max|logit|), same
# argmax) and its NLL PyTorch's within 1e-3; the greedy continuation of a fixed prompt is the same
# 24 ids in C and PyTorch.
source "$(dirname "$0")/../lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
py="${PYTHON:-/usr/bin/python3}"
df="${DF:-$root/build/deltafin}"
model="$root/models/k3-mini"
t="${DF_TEST_TMP:-/tmp}/shipped-model"
rm -rf "$t" && mkdir -p "$t"

(cd "$model" && sha256sum --quiet -c SHA256SUMS)
for f in "$model"/*.safetensors "$model"/config.json "$model"/generation_config.json "$model"/model.safetensors.index.json \
    "$model"/tiktoken.model "$model"/tokenizer_config.json; do
    expect_grep "  $(basename "$f")\$" "$model/SHA256SUMS" || fail "$(basename "$f") is not in SHA256SUMS"
done
"$df" inspect "$model" >"$t/inspect.txt"
expect_grep "valid K3-architecture checkpoint" "$t/inspect.txt"

paragraph='The lighthouse keeper climbed the narrow stairs every evening to light the lamp. Ships passing
the rocky coast relied on its beam to find the harbour, and on stormy nights he stayed awake until
morning, watching the sea and writing the weather in his book.'
ids=$(printf '%s' "$paragraph" | "$df" tokenize --model "$model")
[ "$(echo "$ids" | wc -w)" -ge 64 ] || fail "the paragraph is $(echo "$ids" | wc -w) tokens, fewer than 64"
"$py" "$root/tools/train/agree.py" --df "$df" --model "$model" --tokens "$ids" --tmp "$t/agree"

prompt=$(printf '%s' 'Python is a programming language that' | "$df" tokenize --model "$model")
"$py" "$root/tools/train/agree.py" --df "$df" --model "$model" --tokens "$prompt" --greedy 24 --tmp "$t/greedy"
echo "shipped model: ok"

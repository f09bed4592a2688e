#!/usr/bin/env bash
# Builds every input of the small model's training from Debian packages, in OUTDIR:
#   1. the English corpus (build_corpus.py): train.jsonl, valid.jsonl, manifest.json
#   2. the tokenizer (build/tools/tokenizer/train_bpe): tiktoken.model, tokenizer_config.json
#   3. the chat and tool conversations (chats.py): chat_train.jsonl, chat_valid.jsonl
#   4. the token ids (build/tools/corpus/encode_data): train.bin, valid.bin, chat_train.bin,
#      chat_train.mask, chat_valid.bin, chat_valid.mask, and data.json describing them
#   5. the bundle that travels with the code: training-data.tar.xz
# Usage: tools/corpus/build.sh OUTDIR   (MERGEABLE=8192 by default: mergeable tokens of the vocabulary)
# See tools/corpus/README.md for what each step does, its time and its sizes.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
py=/usr/bin/python3
mergeable="${MERGEABLE:-8192}"
timings="$out/timings.tsv"
: > "$timings"
step() { # name, command...
    local name="$1" t0=$SECONDS; shift
    echo "== $name" >&2
    "$@"
    printf '%s\t%d\n' "$name" $((SECONDS - t0)) >> "$timings"
}

step tools make -C "$repo" -j2 build/tools/tokenizer/train_bpe build/tools/corpus/encode_data >&2
step corpus nice -n 10 "$py" "$repo/tools/corpus/build_corpus.py" --out "$out"
step tokenizer nice -n 10 "$repo/build/tools/tokenizer/train_bpe" --docs "$out/train.jsonl" --out "$out" \
    --mergeable "$mergeable"
step chats nice -n 10 "$py" "$repo/tools/corpus/chats.py" --corpus "$out" --out "$out"
enc="$repo/build/tools/corpus/encode_data"
encode_all() {
    for split in train valid; do
        "$enc" docs --tokenizer "$out" --in "$out/$split.jsonl" --out "$out/$split.bin" > "$out/$split.stats"
        "$enc" chats --tokenizer "$out" --in "$out/chat_$split.jsonl" --out "$out/chat_$split.bin" \
            --mask "$out/chat_$split.mask" > "$out/chat_$split.stats"
    done
}
bundle_all() {
    (cd "$out" && tar -cf - train.bin valid.bin chat_train.bin chat_train.mask chat_valid.bin chat_valid.mask \
        tiktoken.model tokenizer_config.json data.json manifest.json | xz -9 -T2 > training-data.tar.xz.tmp)
    mv "$out/training-data.tar.xz.tmp" "$out/training-data.tar.xz"
}
step encode encode_all
"$py" "$repo/tools/corpus/data_json.py" "$out"
step bundle bundle_all
"$py" "$repo/tools/corpus/data_json.py" "$out" --bundle training-data.tar.xz
echo "done: $out" >&2

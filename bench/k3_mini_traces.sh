#!/usr/bin/env bash
# Router traces of the shipped model (models/k3-mini) on its validation data, the experts reused
# between consecutive tokens, and the cache policies' hit rates on them:
#
#   bench/k3_mini_traces.sh DATA_DIR [OUT_DIR]
#
# DATA_DIR is tools/corpus's output (valid.bin, chat_valid.bin and its mask). Traces (K3_TRACE)
# are written while `deltafin nll --window 512` scores every 20th window of the validation text
# (41 windows, 20,951 positions) and every 10th window of the validation chats (32 windows), and
# while `run --chat` answers one question with speculation off (a verify pass would trace its
# rejected rows too). OUT_DIR/k3-mini-valid.jsonl is the small representative trace kept in the
# repository as bench/traces/k3-mini-valid.jsonl: the first two text windows, the first two chat
# windows and the chat answer (about 2,200 positions, 0.8 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bench/k3_mini_traces.sh DATA_DIR [OUT_DIR]}
out=${2:-/tmp/deltafin-k3-mini-traces}
df=${DF:-build/deltafin}
py=${PYTHON:-/usr/bin/python3}
model=models/k3-mini
mkdir -p "$out"
rm -f "$out"/trace-*.jsonl "$out/k3-mini-valid.jsonl"

for split_every in text:20 chat:10; do
    split=${split_every%:*} every=${split_every#*:}
    "$py" tools/train/evalset.py --data "$data" --split "$split" --every "$every" --out "$out/$split"
    "$py" tools/train/evalset.py --data "$data" --split "$split" --every "$every" --first 2 --out "$out/$split-2"
done

export K3_THREADS=${K3_THREADS:-1}
for split in text chat; do
    K3_TRACE="$out/trace-$split.jsonl" "$df" nll --model "$model" --tokens-file "$out/$split.tokens" --window 512 >/dev/null 2>&1
    K3_TRACE="$out/k3-mini-valid.jsonl" "$df" nll --model "$model" --tokens-file "$out/$split-2.tokens" --window 512 >/dev/null 2>&1
done
K3_SPEC=0 K3_TRACE="$out/k3-mini-valid.jsonl" "$df" run --model "$model" --chat \
    --prompt 'What does the word "serendipity" mean?' --max-new 200 >/dev/null 2>&1

for t in "$out/trace-text.jsonl" "$out/trace-chat.jsonl" "$out/k3-mini-valid.jsonl"; do
    "$py" bench/trace_reuse.py "$t" --window 511
    build/bench/bench_stream_policy "$t"
done

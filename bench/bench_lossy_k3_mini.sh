#!/usr/bin/env bash
# The lossy modes on the shipped model (models/k3-mini): the int8 spine (`convert-spine` on a copy)
# and K3_MOE_TOP_K = 6, 4, 2 (of 8), against the exact bf16 model on validation subsets:
#
#   bench/bench_lossy_k3_mini.sh DATA_DIR [OUT_DIR]
#
# Sets (tools/train/evalset.py): every 8th 512-token window of the validation text (101 windows,
# 51,712 tokens) and every 3rd window of the validation chats (106 windows, 54,272 tokens, the
# assistant's 19,000-odd tokens counted), each window from an empty state (`nll --window 512`).
# Per mode: NLL (nats/token), its difference to bf16, and top-1 agreement: the share of counted
# targets where the mode's greedy prediction equals bf16's (`nll --argmax`).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bench/bench_lossy_k3_mini.sh DATA_DIR [OUT_DIR]}
out=${2:-/tmp/deltafin-bench-lossy-k3-mini}
df=${DF:-build/deltafin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
"$py" tools/train/evalset.py --data "$data" --split text --every 8 --out "$out/text"
"$py" tools/train/evalset.py --data "$data" --split chat --every 3 --out "$out/chat"
rm -rf "$out/int8" && cp -r models/k3-mini "$out/int8"
"$df" convert-spine --model "$out/int8" 2>"$out/convert.err" | tee "$out/convert.txt"

export K3_THREADS=${K3_THREADS:-1}
score() { # name, model, env...
    local name=$1 model=$2; shift 2
    for split in text chat; do
        env "$@" nice -n 10 "$df" nll --model "$model" --tokens-file "$out/$split.tokens" --window 512 \
            --mask "$out/$split.mask" --argmax "$out/$name.$split.argmax" 2>/dev/null >"$out/$name.$split.nll"
    done
}
score bf16 models/k3-mini K3_SPINE=bf16
score int8 "$out/int8" K3_SPINE=int8
for k in 6 4 2; do
    score "top$k" models/k3-mini K3_SPINE=bf16 K3_MOE_TOP_K=$k
done

"$py" - "$out" <<'PY'
import sys
out = sys.argv[1]
def nll(name, split):
    return float(open(f"{out}/{name}.{split}.nll").read().split()[1])
def agree(name, split):
    a = open(f"{out}/{name}.{split}.argmax").read().split()
    b = open(f"{out}/bf16.{split}.argmax").read().split()
    assert len(a) == len(b)
    return sum(x == y for x, y in zip(a, b)) / len(a)
print(f"{'mode':<28} {'text NLL':>9} {'vs bf16':>8} {'top-1 =':>8} {'chat NLL':>9} {'vs bf16':>8} {'top-1 =':>8}")
for name, label in (("bf16", "bf16 spine, top-8 (exact)"), ("int8", "K3_SPINE=int8"), ("top6", "K3_MOE_TOP_K=6"),
                    ("top4", "K3_MOE_TOP_K=4"), ("top2", "K3_MOE_TOP_K=2")):
    cells = []
    for split in ("text", "chat"):
        v, d = nll(name, split), nll(name, split) - nll("bf16", split)
        cells.append(f"{v:>9.4f} {d:>+8.4f} {100 * agree(name, split):>7.2f}%")
    print(f"{label:<28} " + " ".join(cells))
PY

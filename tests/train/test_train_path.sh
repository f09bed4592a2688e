#!/usr/bin/env bash
# The whole training path on the tiny shape, on the CPU: a few steps of each phase (pretrain, chat
# mix with a loss mask, quantisation-aware) on fixed token files lower the validation NLL; the
# export is a checkpoint the engine validates and whose SHA256SUMS hold; `deltafin logits` equals
# PyTorch's logits within the project's bound (1e-4 x max(1, max|logit|), same argmax) and
# `deltafin nll` PyTorch's NLL within 1e-3; the float64 NumPy reference agrees with both, greedy
# continuation included; a second run starts from the exported checkpoint.
source "$(dirname "$0")/../lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
py="${PYTHON:-/usr/bin/python3}"
df="${DF:-$root/build/deltafin}"
t="${DF_TEST_TMP:-/tmp}/train-path"
rm -rf "$t" && mkdir -p "$t/data"

# the tokenizer files of the tiny shape's vocabulary (512 ranks + 256 specials)
"$df" synth --preset tiny --seed 1 --out "$t/synth" --quiet >/dev/null

# fixed token files: a sparse random Markov chain (learnable in a few steps), and "chat" files whose
# mask marks every other run of 8 tokens as targets
"$py" - "$t/data" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
g = np.random.default_rng(123)
nxt = g.integers(0, 512, size=(512, 3))
def chain(n):
    out = np.empty(n, np.uint16); s = 0
    for i in range(n):
        s = nxt[s, g.integers(0, 3)]; out[i] = s
    return out
chain(40000).tofile(f"{d}/train.bin"); chain(4000).tofile(f"{d}/valid.bin")
for name, n in (("chat_train", 8000), ("chat_valid", 2000)):
    ids = chain(n); ids[::50] = 514          # <|end_of_msg|>
    ids.tofile(f"{d}/{name}.bin")
    ((np.arange(n) // 8) % 2).astype(np.uint8).tofile(f"{d}/{name}.mask")
EOF

train() { "$py" "$root/tools/train/train.py" --shape tiny --data "$t/data" --tokenizer "$t/synth" --batch 8 --seq 32 \
          --warmup 3 --lr 1e-2 --eval-windows 4 --log-every 4 --threads 2 "$@"; }
train --out "$t/model" --metrics "$t/metrics.json" --steps 12 --eval-every 100 --chat-frac 0.25 --qat-frac 0.25

"$py" - "$t/metrics.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
first, last = m["evals"][0]["nll"], m["final"]["fp32"]
print("validation NLL at step 0:", first, "after training:", last, "exported:", m["final"]["exported"])
assert m["evals"][0]["step"] == 0
assert last["text"] < first["text"] - 0.5, "text NLL did not decrease by 0.5 nats"
assert last["chat"] < first["chat"] - 0.3, "chat NLL (masked tokens) did not decrease by 0.3 nats"
assert set(m["phases"]) == {"pretrain", "chat", "qat"}, m["phases"]
assert "before_qat" in m and "mxfp4_experts" in m["before_qat"]
for split in ("text", "chat"):
    assert abs(m["nll_cost"][split]["mxfp4"]) < 0.05 and abs(m["nll_cost"][split]["bf16"]) < 0.05, m["nll_cost"]
EOF

(cd "$t/model" && sha256sum --quiet -c SHA256SUMS)
"$df" inspect "$t/model" >/dev/null
"$py" "$root/tools/train/agree.py" --df "$df" --model "$t/model" --tokens-bin "$t/data/valid.bin" --n 64 --ref --tmp "$t/agree"
"$py" "$root/tools/train/agree.py" --df "$df" --model "$t/model" --tokens-bin "$t/data/chat_valid.bin" --n 64 --tmp "$t/agree"
"$py" "$root/tests/reference/compare.py" --df "$df" --model "$t/model" --tokens "7 99 3 514 42 42 1" --greedy 16

# a second run continues from the exported checkpoint (the way runs chain on the GPU machine)
train --init-from "$t/model" --out "$t/model2" --metrics "$t/metrics2.json" --steps 1 --eval-every 100 --chat-frac 0 --qat-frac 0
cmp "$t/model/config.json" "$t/model2/config.json"
"$py" - "$t/metrics.json" "$t/metrics2.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
start = b["evals"][0]["nll"]["text"]
print("second run starts at", start, "; first run exported", a["final"]["exported"]["text"])
assert abs(start - a["final"]["exported"]["text"]) < 1e-5, "the second run did not start from the exported weights"
EOF
echo "train path: ok"

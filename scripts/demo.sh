#!/usr/bin/env bash
# The main job on the model shipped in the repository, models/k3-mini: a small model with Kimi K3's
# exact architecture (12 layers, 64 experts top-8, 35.3M parameters), trained in about 19 GPU-minutes
# on English from Debian's documentation and dictionaries (models/k3-mini/README.md). It is not K3
# and knows little; what is shown is the engine running a trained model of K3's design exactly.
# Checks the files, inspects the checkpoint, continues a prompt (greedy, then sampled with a fixed
# seed) and answers a chat question (greedy).
set -euo pipefail
cd "$(dirname "$0")/.."
df=./build/deltafin
model=models/k3-mini
(cd "$model" && sha256sum --quiet -c SHA256SUMS) && echo "$model: SHA256SUMS verified"
"$df" inspect "$model"
echo
echo "== a prompt continued (greedy, 48 tokens)"
"$df" run --model "$model" --prompt "The program reads a file and" --max-new 48 --stats
echo
echo "== the same prompt, sampled (temperature 0.7, top-p 0.9, frequency penalty 0.5, seed 1: reproducible, not exact)"
"$df" run --model "$model" --prompt "The program reads a file and" --max-new 60 \
    --temperature 0.7 --top-p 0.9 --frequency-penalty 0.5 --seed 1
echo
echo "== a chat question (greedy; the thinking is printed to stderr, the answer to stdout)"
"$df" run --model "$model" --chat --prompt 'What does the word "teacher" mean?' --max-new 200 --stats

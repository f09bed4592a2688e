#!/usr/bin/env bash
# The main job on a model the program makes itself: synthesise a small K3-architecture checkpoint
# (random weights, exact K3 layout), inspect it, and generate from it with --stats.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${DEMO_MODEL:-models/demo-small}"
[ -f "$model/config.json" ] || ./build/deltafin synth --preset small --seed 1 --out "$model"
./build/deltafin inspect "$model"
echo "(random weights: the text is meaningless; what is shown is the engine running the K3 architecture)"
./build/deltafin run --model "$model" --prompt "The capital of France is" --max-new 24 --stats

#!/usr/bin/env bash
# Rebuilds the shipped model (models/k3-mini) from nothing: the training data from Debian packages,
# then the two training runs that made it, then the checkpoint put together and checked.
#
#   bash tools/train/reproduce.sh WORKDIR [BUNDLE]
#
# Run from anywhere on a Debian 12 machine with a CUDA GPU and PyTorch 2.x for $PYTHON (default
# python3); the shipped model came from one NVIDIA H200 (torch 2.11.0+cu130): 505 s and 524 s of
# wall time for the two runs. Without BUNDLE the data is built first (tools/corpus/build.sh
# WORKDIR/data, 6.5-8 minutes on two cores; it names the apt packages it needs); with BUNDLE (a
# training-data.tar.xz built earlier, e.g. on another machine) that step is skipped.
#
# Both runs are budgeted in wall time (train.py --minutes: the phases and the learning-rate
# schedule follow the share of the time spent), so a GPU of another speed sees another number of
# tokens, and GPU kernels are not bit-reproducible: expect validation NLLs within a few hundredths
# of tools/train/README.md's, not the same bytes. The result goes to WORKDIR/k3-mini (compare with
# models/k3-mini: tools/train/evaluate.py --model WORKDIR/k3-mini --data WORKDIR/data).
set -euo pipefail
work=${1:?usage: reproduce.sh WORKDIR [BUNDLE]}
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
bundle=${2:-}
if [ -z "$bundle" ]; then
    bash "$repo/tools/corpus/build.sh" "$work/data"
    bundle="$work/data/training-data.tar.xz"
fi
bundle="$(cd "$(dirname "$bundle")" && pwd)/$(basename "$bundle")"
cd "$repo"

# run 1: from scratch, 9.0 minutes (pretrain, then a quarter of the run on the chat mix, then QAT)
rm -rf "$work/r1" "$work/r2" "$work/prev" "$work/k3-mini"
mkdir -p "$work/r1" "$work/r2" "$work/prev"
OUT="$work/r1" bash tools/train/gpu_run.sh "$bundle" 9.0 --chat-frac 0.25 --chat-mix 0.6

# run 2: continues from run 1's exported checkpoint, 9.3 minutes, lower peak learning rate
cp "$work"/r1/model-*.safetensors "$work/r1/model-meta.tar" "$work/prev/"
OUT="$work/r2" bash tools/train/gpu_run.sh "$bundle" 9.3 --init-from "$work/prev" --lr 1.5e-3 --warmup 50 \
    --chat-frac 0.35 --chat-mix 0.6 --seed 1

mkdir -p "$work/k3-mini"
cp "$work"/r2/model-*.safetensors "$work/k3-mini/"
tar -xf "$work/r2/model-meta.tar" -C "$work/k3-mini"
(cd "$work/k3-mini" && sha256sum --quiet -c SHA256SUMS)
echo "reproduce: the model is in $work/k3-mini (metrics: $work/r1/metrics.json, $work/r2/metrics.json)"

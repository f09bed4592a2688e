#!/usr/bin/env bash
# Decode and prefill on K3's real layer shapes, the GPU against the machine's CPU cores side by side:
# one `deltafin bench` per workload, its configurations interleaved round by round, medians and
# ranges of decode s/token and prefill tokens/s, the ratio to the CPU row (the baseline), and a
# failure unless every row gives the CPU's tokens.
#
#   bench/bench_gpu.sh [layers] [runs] [new_tokens]     (defaults: 3 5 33; run where a GPU answers)
#
# Needs a binary from `make cuda` (DF, default build-cuda/deltafin). Writes `synth --preset k3
# --layers N` (12.8 GB a layer) under $BENCH_DIR (default /tmp/deltafin-bench-gpu) unless a kept
# one is there; the model it wrote is removed at the end, also after a failure, unless KEEP=1. Rows: the CPU (baseline); the layer pass with every weight on the GPU, its decode
# steps replayed as CUDA graphs (the default) and launched one by one (K3_DEV_GRAPHS=0); with
# no GPU expert cache (experts in page-locked host memory: split as measured, copied, on the CPU
# threads); with a 2 GB cache. Workloads: decode (one-token prompt, speculation off) and prefill (a
# 16-token prompt in one chunk). Each table is also kept in $BENCH_DIR/results (NAME.txt, NAME.json).
set -euo pipefail
cd "$(dirname "$0")/.."
layers="${1:-3}" runs="${2:-5}" new="${3:-33}"
df="${DF:-build-cuda/deltafin}"
dir="${BENCH_DIR:-/tmp/deltafin-bench-gpu}"
model="$dir/k3-$layers"
out="$dir/results"
[ -x "$df" ] || { echo "bench_gpu: $df missing: build it with make cuda" >&2; exit 1; }
mkdir -p "$dir" "$out"
if [ ! -f "$model/config.json" ]; then # written here: removed at the end (KEEP=1 keeps it for the next run)
    trap '[ "${KEEP:-0}" = 1 ] || rm -rf "$model"' EXIT
    "$df" synth --preset k3 --layers "$layers" --seed 2 --out "$model" --quiet
fi
echo "model $model ($(du -sh "$model" | cut -f1)), $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"

configs=(--config K3_DEV=cpu
         --config K3_DEV=cuda
         --config K3_DEV=cuda,K3_DEV_GRAPHS=0
         --config K3_DEV=cuda,K3_DEV_EXPERT_GB=0
         --config K3_DEV=cuda,K3_DEV_EXPERT_GB=0,K3_DEV_HOST_EXPERTS=copy
         --config K3_DEV=cuda,K3_DEV_EXPERT_GB=0,K3_DEV_HOST_EXPERTS=cpu
         --config K3_DEV=cuda,K3_DEV_EXPERT_GB=2)

workload() { # name, bench options...
    local name=$1
    shift
    echo "== $name"
    K3_STORE=mapped "$df" bench --model "$model" "$@" --runs "$runs" --warmup "${configs[@]}" --json "$out/$name.json" \
        >"$out/$name.txt" 2>&1 || { cat "$out/$name.txt" >&2; exit 1; }
    cat "$out/$name.txt"
}

workload decode --tokens 1 --max-new "$new" --no-spec
workload prefill --tokens "11 12 13 14 15 16 17 18 11 12 13 14 15 16 17 18" --max-new 2 --chunk 16 --no-spec

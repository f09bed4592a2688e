#!/usr/bin/env bash
# One call's worth of prefill measurements on a GPU machine (bench/bench_prefill.sh underneath), for
# a machine lent by the minute: the host-to-GPU copy rate of page-locked memory (the floor of experts
# kept in host memory), then K3-shaped layers (synth --preset k3) prefilled by the GPU with the
# experts in host memory and all resident, tensor cores on and off, windows against 64-row passes,
# and the CPU's cores beside.
#
#   bench/gpu_prefill_round.sh [layers] [lengths] [part]    part: gpu | cpu | all (default all)
#
# Run it with DF pointing at a CUDA build (and K3_DEV unset). Prints one table per part.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-3} lengths=${2:-"512 2048 8192"} part=${3:-all}
export DF=${DF:-build-cuda/deltafin}
python3 - <<'EOF' || echo "(no torch here: the copy rate is not measured)"
import time, torch
n = 4 << 30
src = torch.empty(n, dtype=torch.uint8).pin_memory()
dst = torch.empty(n, dtype=torch.uint8, device="cuda")
for _ in range(2): dst.copy_(src, non_blocking=True)
torch.cuda.synchronize()
t = time.time()
for _ in range(5): dst.copy_(src, non_blocking=True)
torch.cuda.synchronize()
print(f"host-to-GPU copy of page-locked memory: {5 * n / (time.time() - t) / 1e9:.1f} GB/s")
EOF
host="K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0"
if [ "$part" != cpu ]; then
    bash bench/bench_prefill.sh -l "$layers" -r 1 -t "$lengths" \
        "gpu, host experts, window:$host" \
        "gpu, host experts, window, CUDA cores:$host K3_DEV_TENSOR_CORES=0"
    bash bench/bench_prefill.sh -l "$layers" -r 1 -t "512 2048" \
        "gpu, host experts, 64-row passes:$host K3_PREFILL_WINDOW=64" \
        "gpu, resident, window:K3_DEV=cuda K3_STORE=mapped" \
        "gpu, resident, 64-row passes:K3_DEV=cuda K3_STORE=mapped K3_PREFILL_WINDOW=64"
fi
if [ "$part" != gpu ]; then
    bash bench/bench_prefill.sh -l "$layers" -r 1 -t "512" \
        "cpu, window:K3_DEV=cpu K3_STORE=mapped" "cpu, 64-row passes:K3_DEV=cpu K3_STORE=mapped K3_PREFILL_WINDOW=64"
fi

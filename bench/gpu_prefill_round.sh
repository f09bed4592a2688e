#!/usr/bin/env bash
# One call's worth of prefill measurements on a GPU machine lent by the minute (bench/bench_prefill.sh
# underneath), most wanted first, so that a call cut short still brings back the first tables:
#   copy:     the host-to-GPU copy rate of page-locked memory (the floor of experts kept in host
#             memory);
#   host:     K3-shaped layers (synth --preset k3) prefilled by the GPU with the experts in host
#             memory, one window per prompt, at each length; beside it 64-row passes (the schedule
#             before windows) and the CUDA cores instead of the tensor cores, at 2048 tokens;
#   resident: every weight on the GPU, a window against 64-row passes;
#   cpu:      the machine's cores, a window against 64-row passes;
#   long:     one prompt of LONG tokens (default 131072) with the context raised to hold it: its
#             prefill time, the start-up line (memory plan, MLA cache size, window);
#   profile:  where a window's time goes (DELTAFIN_PROFILE=1: one line per forward, its phases),
#             experts in host memory, at each length (a window's work grows faster than its rows:
#             2,048 -> 8,192 tokens took 0.9 -> 10.6 s of compute on 2 layers, 2026-12-04).
#
#   bench/gpu_prefill_round.sh [layers] [lengths] [parts] [long]
#       defaults: 2 layers, "512 2048 8192 32768", "copy host resident cpu long", 131072
#
# Run it with DF pointing at a CUDA build (and K3_DEV unset). Each configuration runs once after a
# warm-up run, except the long prompt (once).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-2} lengths=${2:-"512 2048 8192 32768"} parts=${3:-"copy host resident cpu long"} long=${4:-131072}
export DF=${DF:-build-cuda/deltafin}
want() { [[ " $parts " == *" $1 "* ]]; }
bench() { bash bench/bench_prefill.sh -l "$layers" -r 1 "$@"; }
if want copy; then
    python3 - <<'PY' || echo "(no torch here: the copy rate is not measured)"
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
PY
fi
host="K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0"
if want host; then
    bench -t "2048" "gpu, host experts, window:$host" "gpu, host experts, 64-row passes:$host K3_PREFILL_WINDOW=64" \
        "gpu, host experts, window, CUDA cores:$host K3_DEV_TENSOR_CORES=0"
    others=$(tr ' ' '\n' <<<"$lengths" | grep -vx 2048 | tr '\n' ' ')
    [ -n "${others// /}" ] && bench -t "$others" "gpu, host experts, window:$host"
fi
if want resident; then
    bench -t "2048" "gpu, resident, window:K3_DEV=cuda K3_STORE=mapped" \
        "gpu, resident, 64-row passes:K3_DEV=cuda K3_STORE=mapped K3_PREFILL_WINDOW=64"
fi
if want cpu; then
    bench -t "512" "cpu, window:K3_DEV=cpu K3_STORE=mapped" "cpu, 64-row passes:K3_DEV=cpu K3_STORE=mapped K3_PREFILL_WINDOW=64"
fi
if want profile; then
    model="${BENCH_DIR:-/tmp/deltafin-bench}/k3-$layers"
    [ -f "$model/config.json" ] || "$DF" synth --preset k3 --layers "$layers" --seed 2 --out "$model" --quiet
    vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["text_config"]["vocab_size"])' "$model/config.json")
    tmp=$(mktemp -d)
    for n in $lengths; do
        awk -v n="$n" -v v="$vocab" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * (v - 300)) }' >"$tmp/p"
        echo "== profile of a $n-token window, experts in host memory"
        # shellcheck disable=SC2086
        env $host K3_SPEC=0 DELTAFIN_PROFILE=1 "$DF" run -m "$model" --tokens-file "$tmp/p" -n 1 --stats >/dev/null 2>"$tmp/err" ||
            { tail -3 "$tmp/err"; exit 1; }
        grep -v '^deltafin: ' "$tmp/err" | head -20
    done
    rm -rf "$tmp"
fi
if want long; then
    model="${BENCH_DIR:-/tmp/deltafin-bench}/k3-$layers"
    vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["text_config"]["vocab_size"])' "$model/config.json")
    tmp=$(mktemp -d)
    awk -v n="$long" -v v="$vocab" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * (v - 300)) }' >"$tmp/prompt"
    echo "== one $long-token prompt, experts in host memory, context $((long + 64))"
    # shellcheck disable=SC2086
    env $host K3_SPEC=0 "$DF" run -m "$model" -c $((long + 64)) --tokens-file "$tmp/prompt" -n 1 --stats \
        --stats-json "$tmp/s.json" >/dev/null 2>"$tmp/err" || { tail -3 "$tmp/err"; exit 1; }
    head -2 "$tmp/err"
    python3 - "$tmp/s.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"prefill {s['prompt_tokens']} tokens in {s['prefill_s']:.1f} s: {s['prefill_tokens_per_s']:.1f} tok/s")
PY
    rm -rf "$tmp"
fi

#!/usr/bin/env bash
# The CUDA device on a machine with an NVIDIA GPU, in its two passes (K3_DEV_PASS):
#   products: only the matrix products on the GPU: logits bit-identical to the CPU kernels for every
#             weight format (BF16 spine, int8 spine, MXFP4 experts) and store layout (mapped;
#             streamed experts; streamed spine layers);
#   layers:   decode steps (T = 1) with every layer on the GPU: logits within the fp64 reference's
#             tolerance and the reference's greedy tokens (tests/reference/compare.py, every
#             position fed one at a time), and the CPU's greedy tokens for every weight format and
#             store layout, a refilled expert cache, a streamed spine, speculation, the expanded
#             MLA cache (which falls back to the products) and a long context;
# then decode speed side by side with the CPU on a model with K3's real layer shapes.
#
#   tests/cuda/device_check.sh DELTAFIN_CUDA_BINARY [scratch_dir] [k3_layers] [check|k3|all]
#
# Not part of `make test` (CI has no GPU); run it where `nvidia-smi` answers, with a binary from
# `make cuda`. Prints PASS/FAIL lines and a timing table last.
set -u
df="$1" dir="${2:-/tmp/deltafin-cuda}" layers="${3:-2}" what="${4:-all}"
py="${PYTHON:-python3}"
ref="$(cd "$(dirname "$0")/../reference" && pwd)/compare.py"
mkdir -p "$dir"
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || bad "nvidia-smi"
toks="5 17 300 42 42 42 7 100 3 9 12 60 77 1 2 3 88 21 4 250 600 11 12 13"

# Logits of the whole token list as one chunk, CPU against the GPU's products: bit-identical.
same() { # label, model, extra env...
    local label=$1 model=$2; shift 2
    env "$@" K3_DEV=cpu "$df" logits --model "$model" --tokens "$toks" --out "$dir/cpu.bin" 2>"$dir/cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/cpu.err")"; return; }
    env "$@" K3_DEV=cuda K3_DEV_PASS=products "$df" logits --model "$model" --tokens "$toks" --out "$dir/gpu.bin" \
        2>"$dir/gpu.err" || { bad "$label: cuda run: $(tail -1 "$dir/gpu.err")"; return; }
    cmp -s "$dir/cpu.bin" "$dir/gpu.bin" && pass "products, $label: logits bit-identical" || bad "products, $label: logits differ"
}

# Every position fed alone, CPU against the GPU's products: the decode kernels (wide loads) are
# bit-identical too.
same1() { # label, model, extra env...
    local label=$1 model=$2; shift 2
    env "$@" K3_DEV=cpu "$df" logits --model "$model" --tokens "$toks" --chunk 1 --out "$dir/cpu.bin" 2>/dev/null &&
        env "$@" K3_DEV=cuda K3_DEV_PASS=products "$df" logits --model "$model" --tokens "$toks" --chunk 1 \
            --out "$dir/gpu.bin" 2>"$dir/gpu.err" || { bad "products T=1, $label: $(tail -1 "$dir/gpu.err")"; return; }
    cmp -s "$dir/cpu.bin" "$dir/gpu.bin" && pass "products T=1, $label: logits bit-identical" ||
        bad "products T=1, $label: logits differ"
}

# The layer pass against the fp64 reference, every position fed alone (so every step is a decode
# step on the GPU), and its greedy tokens; the largest difference from the CPU's logits too.
reference() { # label, model, tokens, greedy
    local label=$1 model=$2 t=$3 n=$4
    if K3_DEV=cuda "$py" "$ref" --df "$df" --model "$model" --tokens "$t" --chunk 1 --greedy "$n" --tmp "$dir/ref" \
        >"$dir/ref.log" 2>&1; then
        pass "layers, $label: within the fp64 reference's tolerance, its $n greedy tokens"
    else
        bad "layers, $label: against the reference: $(grep -E 'FAIL|differ|compare:' "$dir/ref.log" | head -3 | tr '\n' ' ')"
    fi
    K3_DEV=cpu "$df" logits --model "$model" --tokens "$t" --chunk 1 --out "$dir/cpu1.bin" 2>/dev/null &&
        K3_DEV=cuda "$df" logits --model "$model" --tokens "$t" --chunk 1 --out "$dir/gpu1.bin" 2>/dev/null &&
        "$py" - "$dir/cpu1.bin" "$dir/gpu1.bin" "$label" <<'EOF'
import sys, numpy as np
a, b = np.fromfile(sys.argv[1], "<f4"), np.fromfile(sys.argv[2], "<f4")
print(f"info layers, {sys.argv[3]}: max |gpu - cpu| = {np.max(np.abs(a - b)):.3e} over logits up to {np.max(np.abs(a)):.3e}"
      f" ({np.count_nonzero(a != b)} of {a.size} differ)")
EOF
}

# Greedy tokens of `run` (prefill by the products, decode steps by the layer pass) = the CPU's.
tokens_same() { # label, model, prompt, count, extra env...
    local label=$1 model=$2 p=$3 n=$4; shift 4
    env "$@" K3_DEV=cpu "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/run.cpu" 2>"$dir/run.cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/run.cpu.err")"; return; }
    env "$@" K3_DEV=cuda "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/run.gpu" 2>"$dir/run.gpu.err" ||
        { bad "$label: cuda run: $(tail -1 "$dir/run.gpu.err")"; return; }
    cmp -s "$dir/run.cpu" "$dir/run.gpu" && pass "layers, $label: same $n tokens as the CPU" || bad "layers, $label: tokens differ"
}

if [ "$what" != k3 ]; then
    "$df" synth --preset tiny --seed 3 --out "$dir/tiny" --quiet >/dev/null
    "$df" synth --preset small --seed 4 --out "$dir/small" --quiet >/dev/null
    "$df" synth --preset big --size-gb 0.8 --seed 1 --out "$dir/big" --quiet >/dev/null
    rm -rf "$dir/small8" && cp -r "$dir/small" "$dir/small8" && "$df" convert-spine --model "$dir/small8" --no-check >/dev/null 2>&1

    same "tiny bf16" "$dir/tiny"
    same "small bf16" "$dir/small"
    same "small int8 spine" "$dir/small8"
    same "small bf16, expanded MLA cache" "$dir/small" K3_MLA_CACHE=expanded
    same "big (896 MXFP4 experts, top-16)" "$dir/big"
    same "big, streamed experts, pinned spine" "$dir/big" K3_STORE=stream K3_RAM_GB=2
    # a 132-slot cache: slots are refilled all the time, and the GPU's copies of them must follow
    same "big, small streamed cache (slots refilled)" "$dir/big" K3_STORE=stream K3_RAM_GB=0.3
    same "big, streamed spine (1 layer pinned)" "$dir/big" K3_STORE=stream K3_RAM_GB=2 K3_PIN_LAYERS=1
    same "small int8, streamed spine" "$dir/small8" K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
    same1 "small bf16" "$dir/small"
    same1 "big (MXFP4 experts)" "$dir/big"
    K3_DEV=cuda "$df" run --model "$dir/small" --tokens "1 2 3" --max-new 4 >/dev/null 2>"$dir/gpu.err"
    grep -q "device cuda (" "$dir/gpu.err" && pass "start-up line names the GPU" || bad "start-up line: $(head -1 "$dir/gpu.err")"

    reference "tiny" "$dir/tiny" "$toks" 16
    reference "small" "$dir/small" "$toks" 16
    reference "big (896 MXFP4 experts)" "$dir/big" "5 17 300 42 7 100 3 9" 8
    long=$(seq 1 400 | awk '{printf "%d ", ($1 * 37) % 1000 + 3}')
    reference "small, 400-position context" "$dir/small" "$long" 8

    tokens_same "tiny" "$dir/tiny" "$toks" 48
    tokens_same "small" "$dir/small" "$toks" 48
    tokens_same "small, speculation off" "$dir/small" "$toks" 48 K3_SPEC=0
    tokens_same "small int8 spine" "$dir/small8" "$toks" 48
    tokens_same "small, expanded MLA cache (products)" "$dir/small" "$toks" 32 K3_MLA_CACHE=expanded
    tokens_same "big, mapped" "$dir/big" "$toks" 48
    tokens_same "big, streamed experts" "$dir/big" "$toks" 48 K3_STORE=stream K3_RAM_GB=2
    tokens_same "big, small streamed cache (slots refilled)" "$dir/big" "$toks" 48 K3_STORE=stream K3_RAM_GB=0.3
    tokens_same "big, experts in host memory, on the CPU" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=cpu
    tokens_same "big, experts in host memory, copied" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=copy
    tokens_same "big, experts in host memory, as measured" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0
    tokens_same "big, streamed spine" "$dir/big" "$toks" 32 K3_STORE=stream K3_RAM_GB=2 K3_PIN_LAYERS=1
    tokens_same "small int8, streamed spine" "$dir/small8" "$toks" 48 K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
    tokens_same "small, long context (2000-token prompt)" "$dir/small" \
        "$(seq 1 2000 | awk '{printf "%d ", ($1 * 91) % 1000 + 3}')" 64 K3_SPEC=0
fi

if [ "$what" != check ]; then
    # timing: K3's real layer shapes (hidden 7168, 96 heads, 896 experts of 17.55 MB, top-16)
    echo "== synth --preset k3 --layers $layers"
    t0=$(date +%s)
    [ -f "$dir/k3/config.json" ] || "$df" synth --preset k3 --layers "$layers" --seed 2 --out "$dir/k3" --quiet >/dev/null ||
        bad "synth k3"
    echo "synth took $(( $(date +%s) - t0 )) s, $(du -sh "$dir/k3" | cut -f1)"
    # one prompt token: every position is a decode step (on the GPU: all in the layer pass, so its
    # phases are the GPU's timeline)
    prompt="1"
    # mapped: weights resident on the GPU (the layer pass copies the spine and every expert that
    # fits at start-up); host: the experts stay in (page-locked) host memory and run copied, on the
    # CPU threads, or as measured; stream: the expert cache is refilled from disk
    rows=("cpu mapped:K3_DEV=cpu K3_STORE=mapped"
          "cuda layers mapped:K3_DEV=cuda K3_STORE=mapped"
          "cuda products mapped:K3_DEV=cuda K3_DEV_PASS=products K3_STORE=mapped"
          "cuda host copy:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=copy"
          "cuda host cpu:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=cpu"
          "cuda host auto:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0"
          "cpu stream:K3_DEV=cpu K3_STORE=stream K3_RAM_GB=24" "cuda layers stream:K3_DEV=cuda K3_STORE=stream K3_RAM_GB=24")
    for round in 1 2; do
        for row in "${rows[@]}"; do
            label=${row%%:*} settings=${row#*:}
            t0=$(date +%s.%N)
            out=$(env $settings K3_SPEC=0 "$df" run --model "$dir/k3" --tokens "$prompt" --max-new 33 --stats \
                2>&1 >"$dir/k3.tok.${label// /_}")
            printf 'round %d %-20s %s (process %s s)\n' "$round" "$label" "$(grep -E '^stats: prompt' <<<"$out")" \
                "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
            [ $round = 2 ] && grep -E '^stats: (phases|layer pass)' <<<"$out" | sed 's/^/        /'
        done
    done
    for label in "cuda layers mapped" "cuda products mapped" "cuda host copy" "cuda host cpu" "cuda host auto" "cpu stream" \
        "cuda layers stream"; do
        cmp -s "$dir/k3.tok.cpu_mapped" "$dir/k3.tok.${label// /_}" && pass "k3 shapes: $label tokens = cpu mapped" ||
            bad "k3 shapes: $label tokens differ"
    done
fi
[ $fail = 0 ] && echo "ALL PASS" || echo "SOME FAILED"
exit $fail

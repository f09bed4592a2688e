#!/usr/bin/env bash
# The CUDA device on a machine with an NVIDIA GPU: logits bit-identical to the CPU kernels for
# every weight format the model reads (BF16 spine, int8 spine, MXFP4 experts) and every store
# layout (mapped; streamed experts; streamed spine layers), and decode
# speed side by side with the CPU on a model with K3's real layer shapes.
#
#   tests/cuda/device_check.sh DELTAFIN_CUDA_BINARY [scratch_dir] [k3_layers]
#
# Not part of `make test` (CI has no GPU); run it where `nvidia-smi` answers, with a binary from
# `make cuda`. Prints PASS/FAIL lines and a timing table last.
set -u
df="$1" dir="${2:-/tmp/deltafin-cuda}" layers="${3:-2}"
mkdir -p "$dir"
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || bad "nvidia-smi"
"$df" synth --preset tiny --seed 3 --out "$dir/tiny" --quiet >/dev/null
"$df" synth --preset small --seed 4 --out "$dir/small" --quiet >/dev/null
"$df" synth --preset big --size-gb 0.8 --seed 1 --out "$dir/big" --quiet >/dev/null
cp -r "$dir/small" "$dir/small8" && "$df" convert-spine --model "$dir/small8" --no-check >/dev/null 2>&1

toks="5 17 300 42 42 42 7 100 3 9 12 60 77 1 2 3 88 21 4 250 600 11 12 13"
same() { # label, model, extra env...
    local label=$1 model=$2; shift 2
    env "$@" K3_DEV=cpu "$df" logits --model "$model" --tokens "$toks" --out "$dir/cpu.bin" 2>"$dir/cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/cpu.err")"; return; }
    env "$@" K3_DEV=cuda "$df" logits --model "$model" --tokens "$toks" --out "$dir/gpu.bin" 2>"$dir/gpu.err" ||
        { bad "$label: cuda run: $(tail -1 "$dir/gpu.err")"; return; }
    cmp -s "$dir/cpu.bin" "$dir/gpu.bin" && pass "$label: logits bit-identical" || bad "$label: logits differ"
}
same "tiny bf16" "$dir/tiny"
same "small bf16" "$dir/small"
same "small int8 spine" "$dir/small8"
same "small bf16, expanded MLA cache" "$dir/small" K3_MLA_CACHE=expanded
same "big (896 MXFP4 experts, top-16)" "$dir/big"
same "big, streamed experts, pinned spine" "$dir/big" K3_STORE=stream K3_RAM_GB=2
# a 132-slot cache: slots are refilled all the time, and the GPU's copies of them must follow
same "big, small streamed cache (slots refilled)" "$dir/big" K3_STORE=stream K3_RAM_GB=0.3
for dev in cpu cuda; do
    K3_DEV=$dev K3_STORE=stream K3_RAM_GB=0.3 "$df" run --model "$dir/big" --tokens "$toks" --max-new 48 \
        >"$dir/refill.$dev" 2>/dev/null
done
cmp -s "$dir/refill.cpu" "$dir/refill.cuda" && pass "small streamed cache: same 48 tokens" || bad "small cache: tokens differ"
# greedy generation through the server's code path: same tokens
K3_DEV=cpu "$df" run --model "$dir/small" --tokens "1 2 3" --max-new 32 >"$dir/cpu.tok" 2>/dev/null
K3_DEV=cuda "$df" run --model "$dir/small" --tokens "1 2 3" --max-new 32 >"$dir/gpu.tok" 2>"$dir/gpu.err"
cmp -s "$dir/cpu.tok" "$dir/gpu.tok" && pass "run: same 32 tokens" || bad "run: tokens differ"
grep -q "device cuda (" "$dir/gpu.err" && pass "start-up line names the GPU" || bad "start-up line: $(head -1 "$dir/gpu.err")"
# a streamed spine: its layers are read into two buffers again and again, and every load is a new
# generation of the layer's residency keys, so the GPU's copies follow (int8 spine too)
same "big, streamed spine (1 layer pinned)" "$dir/big" K3_STORE=stream K3_RAM_GB=2 K3_PIN_LAYERS=1
same "small int8, streamed spine" "$dir/small8" K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
for dev in cpu cuda; do
    K3_DEV=$dev K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1 "$df" run --model "$dir/small" --tokens "$toks" \
        --max-new 48 >"$dir/spine.$dev" 2>/dev/null
done
cmp -s "$dir/spine.cpu" "$dir/spine.cuda" && pass "streamed spine: same 48 tokens" || bad "streamed spine: tokens differ"

# timing: K3's real layer shapes (hidden 7168, 96 heads, 896 experts of 17.55 MB, top-16)
echo "== synth --preset k3 --layers $layers"
t0=$(date +%s)
"$df" synth --preset k3 --layers "$layers" --seed 2 --out "$dir/k3" --quiet >/dev/null || bad "synth k3"
echo "synth took $(( $(date +%s) - t0 )) s, $(du -sh "$dir/k3" | cut -f1)"
prompt="1 2 3 4 5 6 7 8"
# mapped: every weight's key stays the same, so the GPU keeps the experts it has used too;
# stream: the expert cache (page-locked for the GPU) is refilled, so experts are copied per use
rows=("cpu mapped:K3_DEV=cpu K3_STORE=mapped" "cuda mapped:K3_DEV=cuda K3_STORE=mapped"
      "cpu stream:K3_DEV=cpu K3_STORE=stream K3_RAM_GB=24" "cuda stream:K3_DEV=cuda K3_STORE=stream K3_RAM_GB=24")
for round in 1 2; do
    for row in "${rows[@]}"; do
        label=${row%%:*} settings=${row#*:}
        out=$(env $settings K3_SPEC=0 "$df" run --model "$dir/k3" --tokens "$prompt" --max-new 16 --stats \
            2>&1 >"$dir/k3.tok.${label// /_}")
        printf 'round %d %-12s %s\n' "$round" "$label" "$(grep -E '^stats: prompt' <<<"$out")"
    done
done
for label in "cuda mapped" "cpu stream" "cuda stream"; do
    cmp -s "$dir/k3.tok.cpu_mapped" "$dir/k3.tok.${label// /_}" && pass "k3 shapes: $label tokens = cpu mapped" ||
        bad "k3 shapes: $label tokens differ"
done
[ $fail = 0 ] && echo "ALL PASS" || echo "SOME FAILED"
exit $fail

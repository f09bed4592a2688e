#!/usr/bin/env bash
# K3_DEV on a build without the CUDA backend: auto and cpu run on the CPU kernels and say so on
# the start-up line, cuda is refused saying how to get it, anything else is refused; K3_MLA_CACHE
# is validated and named on the start-up line; K3_DEV_EXPERT_GB is validated. (The CUDA device itself is checked on a GPU machine
# by tests/cuda/device_check.sh.)
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/device"
"$DF" synth --preset tiny --seed 2 --out "$t/m" --quiet >/dev/null
for v in "" auto cpu; do
    K3_DEV=$v "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2 >"$t/out" 2>"$t/err"
    expect_grep "| device cpu (" "$t/err"
    expect_eq 2 "$(wc -w <"$t/out")" "tokens generated with K3_DEV=$v"
done
expect_fail "K3_DEV=cuda: this deltafin was built without the CUDA backend (build it with \`make cuda\`" \
    env K3_DEV=cuda "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2
expect_fail "K3_DEV: 'gpu' is not auto, cpu or cuda" env K3_DEV=gpu "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2
K3_MLA_CACHE=expanded "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2 >/dev/null 2>"$t/err"
expect_grep "context 4096 (MLA cache expanded)" "$t/err"
"$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2 >/dev/null 2>"$t/err"
expect_grep "context 65536 (MLA cache latent)" "$t/err"
expect_fail "K3_MLA_CACHE: 'compact' is not latent or expanded" \
    env K3_MLA_CACHE=compact "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2
# K3_DEV_EXPERT_GB (the GPU expert cache's size) takes decimal GB, and nothing else
K3_DEV_EXPERT_GB=0.67 "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2 >/dev/null 2>"$t/err"
for v in x -1 1e9; do
    expect_fail "K3_DEV_EXPERT_GB: '$v' is not a size in GB" \
        env K3_DEV_EXPERT_GB="$v" "$DF" run --model "$t/m" --tokens "1 2 3" --max-new 2
done
echo PASS

#!/usr/bin/env bash
# The AArch64 build computes what the x86-64 build computes, bit for bit: under qemu-user,
# build-aarch64/deltafin (its NEON kernels chosen at run time: --version and the start-up line say
# so) writes logits files identical (cmp) to build/deltafin's, on the bundled trained model and on
# synth models (BF16 spine, MXFP4 experts, the int8 spine after convert-spine, the fp32 small
# tensors), for other thread counts, chunk sizes, the portable kernels and the streaming store;
# synth writes byte-identical checkpoints on both. Needs `make aarch64` and qemu-aarch64
# (scripts/install-deps.sh aarch64).
set -eu
set -o pipefail
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line (kernels, streaming plan)
t="$DF_TEST_TMP/arm_logits"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
# the arm64 dynamic loader and libraries are Debian's multiarch ones (libc6:arm64 and the -dev
# packages' libraries), where qemu finds them without -L
arm() { qemu-aarch64 build-aarch64/deltafin "$@"; }
same() { # same(what, file_x86, file_arm)
    cmp "$2" "$3" >/dev/null || fail "$1: the AArch64 logits differ from the x86-64 ones ($(cmp "$2" "$3" 2>&1 | head -1))"
    echo "ok   $1"
}

# --- the build and its kernels
arm --version >"$t/version"
grep -q "AArch64 Linux; kernels neon portable (this CPU: neon portable)" "$t/version" ||
    fail "--version: $(cat "$t/version")"
arm run -n 1 -p "x" -t 1 2>"$t/startup" >/dev/null
grep -q "device cpu (neon kernels)" "$t/startup" || fail "start-up line: $(cat "$t/startup")"
if "$DF" logits --kernels neon --tokens "1" -o "$t/never.bin" 2>"$t/err"; then fail "x86-64 build took --kernels neon"; fi
grep -q "has no NEON kernels" "$t/err" || fail "x86-64 --kernels neon: $(cat "$t/err")"

# --- the bundled trained model: BF16 spine, MXFP4 experts
text="The capital of France is Paris. def add(a, b): return a + b  # 12345, and then some more words."
"$DF" logits --text "$text" -o "$t/mini.x86" -t 2 2>/dev/null
arm logits --text "$text" -o "$t/mini.arm" -t 2 2>/dev/null
[ "$(stat -c %s "$t/mini.x86")" -gt $((20 * 8448 * 4)) ] || fail "the prompt is shorter than 20 tokens"
same "k3-mini, 2 threads" "$t/mini.x86" "$t/mini.arm"
arm logits --text "$text" -o "$t/mini.arm1" -t 1 --chunk 7 2>/dev/null
same "k3-mini, 1 thread, chunks of 7" "$t/mini.x86" "$t/mini.arm1"
arm logits --text "$text" -o "$t/mini.arm3" -t 3 --chunk 1 2>/dev/null
same "k3-mini, 3 threads, one position per pass" "$t/mini.x86" "$t/mini.arm3"
arm logits --text "$text" -o "$t/mini.port" -t 2 --kernels portable 2>/dev/null
same "k3-mini, portable kernels" "$t/mini.x86" "$t/mini.port"
# the streaming store: every layer read through the I/O threads (O_DIRECT) into a small cache
st=(--store stream -c 512 --pin-layers 0 --ram-gb 0.15)
arm logits --text "$text" -o "$t/mini.stream" -t 2 "${st[@]}" 2>/dev/null
same "k3-mini, streaming store" "$t/mini.x86" "$t/mini.stream"
"$DF" run -p "$text" -n 12 -t 2 >"$t/run.x86" 2>/dev/null
arm run -p "$text" -n 12 -t 2 "${st[@]}" >"$t/run.arm" 2>"$t/run.err"
grep -q "0/12 layers pinned (0.00 GB), 12 streamed" "$t/run.err" || fail "not streamed: $(cat "$t/run.err")"
cmp -s "$t/run.x86" "$t/run.arm" || fail "run: '$(cat "$t/run.arm")', the x86-64 build wrote '$(cat "$t/run.x86")'"
echo "ok   k3-mini, run on the streaming store: the same $(wc -c <"$t/run.x86") bytes of text"

# --- synth models: the generator agrees, and so do the logits (int8 spine too)
"$DF" synth --preset small --seed 7 --out "$t/s.x86" --quiet >/dev/null
arm synth --preset small --seed 7 --out "$t/s.arm" --quiet >/dev/null
diff -r "$t/s.x86" "$t/s.arm" >/dev/null || fail "synth wrote different checkpoints: $(diff -rq "$t/s.x86" "$t/s.arm" | head -3)"
echo "ok   synth small: identical checkpoints"
toks="1 50 300 7 99 100 23 5 700 42 17 256 3 4 5 6"
"$DF" logits -m "$t/s.x86" --tokens "$toks" -o "$t/s.x86.bin" -t 2 2>/dev/null
arm logits -m "$t/s.x86" --tokens "$toks" -o "$t/s.arm.bin" -t 3 --chunk 5 2>/dev/null
same "synth small" "$t/s.x86.bin" "$t/s.arm.bin"
"$DF" convert-spine -m "$t/s.x86" >/dev/null 2>&1
"$DF" logits -m "$t/s.x86" --spine int8 --tokens "$toks" -o "$t/i8.x86.bin" -t 2 2>/dev/null
arm logits -m "$t/s.x86" --spine int8 --tokens "$toks" -o "$t/i8.arm.bin" -t 1 2>/dev/null
cmp -s "$t/i8.x86.bin" "$t/s.x86.bin" && fail "the int8 spine gave the bf16 logits: not in use"
same "synth small, int8 spine" "$t/i8.x86.bin" "$t/i8.arm.bin"

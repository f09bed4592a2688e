#!/usr/bin/env bash
# int8 spine and K3_MOE_TOP_K: convert-spine writes files that an independent numpy decoder
# checks against the BF16 source (scale = max|w|/127, codes rounded half-even); K3_SPINE=int8
# changes the logits within a tolerance; K3_SPINE=bf16 (and auto before conversion) is bit-identical
# to an unconverted checkpoint; an interrupted conversion resumes to the same files; damaged files
# are refused with a message naming them; K3_MOE_TOP_K raises the NLL and is labelled lossy.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/int8"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 4 --out "$t/u" --quiet >/dev/null
cp -r "$t/u" "$t/m"
toks="1 50 300 7 99 100 23 5 700 42 17 256"

# before conversion, auto is bf16 and int8 is refused
K3_SPINE=auto "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/plain.bin"
expect_fail "0 of 64 spine tensors are converted.*convert-spine" \
    env K3_SPINE=int8 "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/x.bin"

out=$("$DF_ASAN" convert-spine --model "$t/m" 2>"$t/conv.err")
echo "$out"
expect_grep "64 tensors converted, 0 already done (of 64)" <<<"$out"
expect_grep "spine int8 (lossy)" "$t/conv.err"
expect_grep "spine bf16 (exact)" "$t/conv.err"
agree=$(sed -n 's/.*top-1 agree \([0-9]*\)\/32.*/\1/p' <<<"$out")
[ "$agree" -ge 16 ] || fail "the int8 spine agrees with bf16 on the top-1 of $agree of 32 positions, not at least 16"

# the files, decoded independently
"$PYTHON" - "$t/m" <<'PY'
import glob, json, os, struct, sys
import numpy as np
m = sys.argv[1]
idx = json.load(open(m + "/model.safetensors.index.json"))["weight_map"]
def bf16(name):
    b = open(m + "/" + idx[name], "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    e = json.loads(b[8:8 + n])[name]
    s, t = e["data_offsets"]
    a = np.frombuffer(b[8 + n + s:8 + n + t], np.uint16).astype(np.uint32) << 16
    return a.view(np.float32).reshape(e["shape"])
files = sorted(glob.glob(m + "/deltafin-int8/*.i8"))
assert len(files) == 64, len(files)
for p in files:
    b = open(p, "rb").read()
    assert b[:8] == b"DFI8ROW1"
    rows, cols, src = struct.unpack("<IIQ", b[8:24])
    assert b[24:64] == bytes(40)
    w = bf16(os.path.basename(p)[:-3]).reshape(rows, cols)
    assert src == w.size * 2 and len(b) == 64 + 4 * rows + rows * cols
    s = np.frombuffer(b[64:64 + 4 * rows], np.float32)
    q = np.frombuffer(b[64 + 4 * rows:], np.int8).reshape(rows, cols)
    want_s = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    assert np.array_equal(s, want_s), p
    ratio = np.divide(w, s[:, None], out=np.zeros_like(w), where=s[:, None] > 0).astype(np.float32)
    want_q = np.clip(np.rint(ratio), -127, 127).astype(np.int8)
    assert np.array_equal(q, want_q), p
print("files ok:", len(files))
PY

# int8 differs from bf16 within a tolerance; bf16 after conversion equals the unconverted model
K3_SPINE=bf16 "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/bf16.bin"
K3_SPINE=int8 "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/int8.bin"
"$DF" logits --model "$t/m" --tokens "$toks" --out "$t/auto.bin"
cmp "$t/plain.bin" "$t/bf16.bin"
cmp "$t/int8.bin" "$t/auto.bin"
if cmp -s "$t/bf16.bin" "$t/int8.bin"; then echo "the int8 spine gave the bf16 logits"; exit 1; fi
"$PYTHON" - "$t/bf16.bin" "$t/int8.bin" <<'PY'
import sys
import numpy as np
a, b = (np.fromfile(f, np.float32).reshape(12, -1) for f in sys.argv[1:])
d = np.abs(a - b).max(axis=1)
print("max drift per position:", np.round(d, 3), "top-1 agree", (a.argmax(1) == b.argmax(1)).sum())
assert d[0] < 0.25 and d.max() < 5.0 and np.isfinite(b).all()
assert (a.argmax(1) == b.argmax(1)).sum() >= 6
PY

# interrupted conversion: the state a kill leaves (whole files plus a stale .tmp) resumes
cp -r "$t/u" "$t/k"
timeout -s KILL 0.05 "$DF" convert-spine --model "$t/k" --no-check >/dev/null 2>&1 || true
mkdir -p "$t/k/deltafin-int8"
cp "$t/m/deltafin-int8/"*.i8 "$t/k/deltafin-int8/"
rm -f "$t/k/deltafin-int8/"*layers.1.* "$t/k/deltafin-int8/"*lm_head*
head -c 100 "$t/m/deltafin-int8/language_model.lm_head.weight.i8" >"$t/k/deltafin-int8/language_model.lm_head.weight.i8.tmp"
n_missing=$((64 - $(ls "$t/k/deltafin-int8/"*.i8 | wc -l)))
out=$("$DF" convert-spine --model "$t/k" --no-check)
echo "$out"
expect_grep "$n_missing tensors converted, $((64 - n_missing)) already done (of 64)" <<<"$out"
diff -r "$t/m/deltafin-int8" "$t/k/deltafin-int8"
expect_grep "0 tensors converted, 64 already done" <<<"$("$DF" convert-spine --model "$t/k" --no-check)"

# damaged files: a clear error naming the file; convert-spine rewrites them
f="$t/k/deltafin-int8/language_model.model.layers.2.mlp.up_proj.weight.i8"
i8=("$t/k/deltafin-int8/"*.i8) # (not `ls | head -1`: under pipefail ls may die of SIGPIPE)
test -f "$f" || f=${i8[0]}
printf 'X' | dd of="$f" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_fail "$(basename "$f"): header does not match" env K3_SPINE=int8 "$DF" logits --model "$t/k" --tokens "$toks" --out "$t/x.bin"
cp "$t/m/deltafin-int8/$(basename "$f")" "$f"
truncate -s -1 "$f"
expect_fail "$(basename "$f"): .*truncated or damaged" "$DF" logits --model "$t/k" --tokens "$toks" --out "$t/x.bin"
"$DF" convert-spine --model "$t/k" --no-check 2>"$t/err" | expect_grep "1 tensors converted, 63 already done"
expect_grep "rewriting" "$t/err"
diff -r "$t/m/deltafin-int8" "$t/k/deltafin-int8"

# settings: bad values are refused
expect_fail "K3_SPINE: 'int4' is not auto, int8 or bf16" env K3_SPINE=int4 "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/x.bin"

# the streamed spine reads the int8 files: the same logits as the mapped int8 spine, with layers
# pinned, streamed, or both (sanitizer build for the streamed reads), and half the spine bytes
for pin in 0 2; do
    K3_STORE=stream K3_PIN_LAYERS=$pin "$DF_ASAN" logits --model "$t/m" --tokens "$toks" --out "$t/s8.bin"
    cmp "$t/int8.bin" "$t/s8.bin"
done
K3_STORE=stream K3_PIN_LAYERS=0 K3_SPINE=bf16 "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/s16.bin"
cmp "$t/bf16.bin" "$t/s16.bin"
K3_STORE=stream K3_PIN_LAYERS=0 "$DF" run --model "$t/m" --tokens "$toks" --max-new 2 >/dev/null 2>"$t/s8.err"
K3_STORE=stream K3_PIN_LAYERS=0 K3_SPINE=bf16 "$DF" run --model "$t/m" --tokens "$toks" --max-new 2 >/dev/null 2>"$t/s16.err"
expect_grep "spine int8 (lossy)" "$t/s8.err"
expect_grep "spine bf16 (exact)" "$t/s16.err"
# a scale damaged after conversion (header intact) fails the streamed read naming the file
cp -r "$t/m" "$t/d"
f="$t/d/deltafin-int8/language_model.model.layers.3.mlp.down_proj.weight.i8"
i8=("$t/d/deltafin-int8/"*layers.3.*.i8)
test -f "$f" || f=${i8[0]}
printf '\xff\xff\xff\xff' | dd of="$f" bs=1 seek=64 conv=notrunc 2>/dev/null
expect_fail "$(basename "$f"): row 0 has scale" \
    env K3_STORE=stream K3_PIN_LAYERS=0 "$DF" logits --model "$t/d" --tokens "$toks" --out "$t/x.bin"

# K3_MOE_TOP_K: fewer experts cost NLL (small preset, top-4) and say so at startup
"$DF" synth --preset small --seed 4 --out "$t/s" --quiet >/dev/null
seq 1 5 600 | tr '\n' ' ' >"$t/toks"
full=$("$DF" nll --model "$t/s" --tokens-file "$t/toks" 2>"$t/full.err" | awk '{print $2}')
one=$(K3_MOE_TOP_K=1 "$DF_ASAN" nll --model "$t/s" --tokens-file "$t/toks" 2>"$t/one.err" | awk '{print $2}')
echo "nll top-4 $full, top-1 $one"
awk -v a="$full" -v b="$one" 'BEGIN { exit !(b > a + 0.01) }' || fail "top-1 NLL $one is not above top-4's $full + 0.01"
expect_grep "experts top-1 of 4 (lossy)" "$t/one.err"
expect_no_grep "lossy" "$t/full.err" || fail "the full top-k is labelled lossy"
expect_eq "$full" "$(K3_MOE_TOP_K=4 "$DF" nll --model "$t/s" --tokens-file "$t/toks" | awk '{print $2}')" "NLL with K3_MOE_TOP_K=4 (the model's own)"
# the settings refuse what no model allows; the engine what this one (top-4) does not
for v in 0 -1 2x ""x 65; do
    expect_fail "K3_MOE_TOP_K: '$v' is not an expert count in 1..64" env K3_MOE_TOP_K="$v" "$DF" nll --model "$t/s" --tokens-file "$t/toks"
done
expect_fail "K3_MOE_TOP_K: '5' is not an expert count in 1..4 (the model's num_experts_per_token)" \
    env K3_MOE_TOP_K=5 "$DF" nll --model "$t/s" --tokens-file "$t/toks"

# bytes read per decode step with every layer streamed (no read-ahead): int8 about half of bf16
cp -r "$t/s" "$t/s8"
quietly "$DF" convert-spine --model "$t/s8" --no-check
step_mb() { K3_PREFETCH=0 K3_PROFILE=1 K3_STORE=stream K3_PIN_LAYERS=0 K3_SPINE=$1 "$DF" run --model "$t/s8" \
    --tokens "1 2 3" --max-new 3 2>&1 >/dev/null | sed -n 's/^profile: pos 4 .*read spine \([0-9.]*\) MB.*/\1/p'; }
i8=$(step_mb int8) b16=$(step_mb bf16)
echo "streamed spine per decode step: int8 $i8 MB, bf16 $b16 MB"
awk -v a="$i8" -v b="$b16" 'BEGIN { exit !(a > 0.4 * b && a < 0.6 * b) }' || fail "int8 reads $i8 MB per step, not 0.4-0.6 x bf16's $b16 MB"
echo "int8 and top-k ok"

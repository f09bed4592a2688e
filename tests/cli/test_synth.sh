#!/usr/bin/env bash
# synth: same seed gives byte-identical files; another seed gives other weights; every preset
# shape validates with inspect; the layer-kind rule and A_log padding are as specified.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/synth"
"$DF" synth --preset tiny --seed 7 --out "$t/a" --quiet >/dev/null
"$DF" synth --preset tiny --seed 7 --out "$t/b" --quiet >/dev/null
"$DF" synth --preset tiny --seed 8 --out "$t/c" --quiet >/dev/null
diff -r "$t/a" "$t/b"
if cmp -s "$t/a/model-00002-of-000003.safetensors" "$t/c/model-00002-of-000003.safetensors"; then
    echo "seeds 7 and 8 wrote the same weights"; exit 1
fi
for f in config.json generation_config.json tiktoken.model tokenizer_config.json model.safetensors.index.json; do
    test -s "$t/a/$f" || { echo "missing $f"; exit 1; }
done
out=$("$DF_ASAN" inspect "$t/a")
echo "$out"
expect_grep "one-based MLA: 4 5)" <<<"$out"
expect_grep "A_log stored 16 (padded" <<<"$out"
"$DF" synth --preset small --seed 1 --out "$t/s" --quiet >/dev/null
out=$("$DF" inspect "$t/s")
echo "$out"
expect_grep "10: 7 KDA, 3 MLA (one-based MLA: 4 8 10)" <<<"$out"
expect_grep "32 experts, top-4" <<<"$out"
expect_grep "3 anchors at the tail" <<<"$out"
"$DF" synth --preset big --size-gb 0.8 --out "$t/big" --quiet >/dev/null
out=$("$DF" inspect "$t/big")
echo "$out"
expect_grep "896 experts, top-16" <<<"$out"
# experts dominate the bytes as in K3
pct=$(sed -n 's/.*experts [0-9.]* GB (\([0-9.]*\)% of the model).*/\1/p' <<<"$out")
awk -v p="$pct" 'BEGIN { exit !(p > 85) }' || fail "experts are $pct% of the big preset's bytes, not over 85%"
# --embed-scale 1 is the default to the byte; 1024 (a power of two, so exact in BF16) multiplies
# every embedding value and leaves every other byte as it was
"$DF" synth --preset tiny --seed 7 --embed-scale 1 --out "$t/e1" --quiet >/dev/null
diff -r "$t/a" "$t/e1"
"$DF" synth --preset tiny --seed 7 --embed-scale 1024 --out "$t/e1024" --quiet >/dev/null
"$PYTHON" - "$t/a" "$t/e1024" <<'PY'
import json, os, struct, sys
import numpy as np
a, b = sys.argv[1:3]
names = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
assert names == sorted(f for f in os.listdir(b) if f.endswith(".safetensors")), "shard lists differ"
def f32(raw):
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
scaled = 0
for f in names:
    da, db = open(os.path.join(a, f), "rb").read(), open(os.path.join(b, f), "rb").read()
    n = struct.unpack("<Q", da[:8])[0]
    assert da[:8 + n] == db[:8 + n], f + ": headers differ"
    for name, r in json.loads(da[8:8 + n]).items():
        if name == "__metadata__":
            continue
        lo, hi = 8 + n + r["data_offsets"][0], 8 + n + r["data_offsets"][1]
        if name.endswith("embed_tokens.weight"):
            x, y = f32(da[lo:hi]), f32(db[lo:hi])
            assert np.count_nonzero(x) > 0.99 * x.size and np.array_equal(y, x * 1024), name + ": not 1024x"
            scaled += 1
        else:
            assert da[lo:hi] == db[lo:hi], f"{f} {name}: changed"
assert scaled == 1, scaled
print("embed-scale: embedding exactly 1024x, every other byte unchanged")
PY
# what the option promises: the scaled model's greedy output settles into a loop within 100
# tokens, the unscaled one's does not (the loop is the weights', not the engine's: the scaled
# model matches the fp64 reference in tests/cli/test_reference.sh)
loop_period() { # model: the period (<= 40) with which 100 greedy tokens repeat from the 21st on, else 0
    "$DF" run --model "$1" --tokens "5 17 300 42 7" --max-new 100 | tail -1 | awk '{
        for (p = 1; p <= 40; p++) { ok = 1; for (i = 21; i <= NF - p; i++) if ($i != $(i + p)) ok = 0; if (ok) { print p; exit } }
        print 0 }'
}
"$DF" synth --preset small --seed 6 --embed-scale 1024 --out "$t/loop" --quiet >/dev/null
"$DF" synth --preset small --seed 6 --out "$t/noloop" --quiet >/dev/null
[ "$(loop_period "$t/loop")" -gt 0 ] || fail "the --embed-scale 1024 model's greedy output does not loop"
expect_eq 0 "$(loop_period "$t/noloop")" "the loop period of the unscaled model's greedy output"
for bad in 0 -1 0.0001 20000 nan inf; do
    expect_fail -E "embed-scale(: '(nan|inf)' is not a number| .* out of range)" "$DF" synth --preset tiny --embed-scale "$bad" --out "$t/x"
done
[ ! -e "$t/x" ] || fail "a refused synth wrote $t/x"
# errors: unknown preset, missing arguments
expect_fail "unknown preset 'nope'" "$DF" synth --preset nope --out "$t/x"
expect_fail "size-gb" "$DF" synth --preset big --out "$t/x"
echo PASS

#!/usr/bin/env bash
# synth: same seed gives byte-identical files; another seed gives other weights; every preset
# shape validates with inspect; the layer-kind rule and A_log padding are as specified.
set -eu
t="$DF_TEST_TMP/synth"
"$DF" synth --preset tiny --seed 7 --out "$t/a" --quiet >/dev/null
"$DF" synth --preset tiny --seed 7 --out "$t/b" --quiet >/dev/null
"$DF" synth --preset tiny --seed 8 --out "$t/c" --quiet >/dev/null
diff -r "$t/a" "$t/b"
! cmp -s "$t/a/model-00002-of-000003.safetensors" "$t/c/model-00002-of-000003.safetensors"
for f in config.json generation_config.json tiktoken.model tokenizer_config.json model.safetensors.index.json; do
    test -s "$t/a/$f" || { echo "missing $f"; exit 1; }
done
out=$("$DF_ASAN" inspect "$t/a")
echo "$out"
grep -q "one-based MLA: 4 5)" <<<"$out"
grep -q "A_log stored 16 (padded" <<<"$out"
"$DF" synth --preset small --seed 1 --out "$t/s" --quiet >/dev/null
out=$("$DF" inspect "$t/s")
echo "$out"
grep -q "10: 7 KDA, 3 MLA (one-based MLA: 4 8 10)" <<<"$out"
grep -q "32 experts, top-4" <<<"$out"
grep -q "3 anchors at the tail" <<<"$out"
"$DF" synth --preset big --size-gb 0.8 --out "$t/big" --quiet >/dev/null
out=$("$DF" inspect "$t/big")
echo "$out"
grep -q "896 experts, top-16" <<<"$out"
# experts dominate the bytes as in K3
pct=$(sed -n 's/.*experts [0-9.]* GB (\([0-9.]*\)% of the model).*/\1/p' <<<"$out")
awk -v p="$pct" 'BEGIN { exit !(p > 85) }'
# errors: unknown preset, missing arguments
! "$DF" synth --preset nope --out "$t/x" 2>"$t/err"
grep -q "unknown preset 'nope'" "$t/err"
! "$DF" synth --preset big --out "$t/x" 2>"$t/err"
grep -q "size-gb" "$t/err"
echo PASS

#!/usr/bin/env bash
# A checkpoint's shards may have any plain file name its index lists: the same weights under
# transformers' names (model-00001-of-00003.safetensors) or arbitrary ones give logits identical
# byte for byte to K3's own names; an index that names something outside the model's directory,
# or a file that is not there, is refused with one line naming it (release and ASan builds).
set -euo pipefail
t="$DF_TEST_TMP/shard_names"
rm -rf "$t"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }

"$DF" synth --preset tiny --seed 5 --out "$t/k3" --quiet >/dev/null

# rename.py DIR NAME... : the shards (in K3's order) renamed to NAME..., the index rewritten
cat >"$t/rename.py" <<'EOF'
import json, os, sys
d, names = sys.argv[1], sys.argv[2:]
p = os.path.join(d, "model.safetensors.index.json")
idx = json.load(open(p))
old = sorted(set(idx["weight_map"].values()))
assert len(old) == len(names), (old, names)
to = dict(zip(old, names))
for a, b in to.items():
    os.rename(os.path.join(d, a), os.path.join(d, b + ".tmp"))
for b in names:
    os.rename(os.path.join(d, b + ".tmp"), os.path.join(d, b))
idx["weight_map"] = {k: to[v] for k, v in idx["weight_map"].items()}
json.dump(idx, open(p, "w"), indent=2)
EOF

copy() { rm -rf "$t/$1"; cp -r "$t/k3" "$t/$1"; }
copy hf
"$PYTHON" "$t/rename.py" "$t/hf" model-00001-of-00003.safetensors model-00002-of-00003.safetensors \
    model-00003-of-00003.safetensors
copy odd
# (sorted by name, the order differs from K3's: the index alone says what each holds)
"$PYTHON" "$t/rename.py" "$t/odd" "zz spine.safetensors" "a-experts.safetensors" "..mid.safetensors"

ids="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"
"$DF" logits -m "$t/k3" --tokens "$ids" -o "$t/k3.bin" 2>/dev/null
for m in hf odd; do
    "$DF" inspect "$t/$m" >"$t/$m.inspect" || fail "$m: inspect refused it"
    "$DF" logits -m "$t/$m" --tokens "$ids" -o "$t/$m.bin" 2>"$t/$m.err" || fail "$m: $(cat "$t/$m.err")"
    cmp "$t/k3.bin" "$t/$m.bin" || fail "$m: logits differ from the same weights under K3's names"
    "$DF" run -m "$t/$m" -p "The cat" -n 6 >"$t/$m.run" 2>/dev/null || fail "$m: run refused it"
done
"$DF_ASAN" logits -m "$t/hf" --tokens "$ids" -o "$t/asan.bin" 2>/dev/null
cmp "$t/k3.bin" "$t/asan.bin" || fail "ASan build: logits differ"

# refusals: one line, exit 1, naming the index and the entry
expect_refused() { # dir, words wanted in the message...
    local m="$1" rc=0
    shift
    "$DF" inspect "$t/$m" >/dev/null 2>"$t/$m.err" || rc=$?
    [ "$rc" -eq 1 ] || fail "$m: exit $rc, wanted 1"
    [ "$(wc -l <"$t/$m.err")" -eq 1 ] || fail "$m: not one line: $(cat "$t/$m.err")"
    for w in "$@"; do grep -qF -- "$w" "$t/$m.err" || fail "$m: the message does not say '$w': $(cat "$t/$m.err")"; done
}
copy up
"$PYTHON" - "$t/up/model.safetensors.index.json" <<'EOF'
import json, sys
p = sys.argv[1]; idx = json.load(open(p))
k = next(iter(idx["weight_map"]))
idx["weight_map"][k] = "../model-00001-of-000003.safetensors"
json.dump(idx, open(p, "w"))
EOF
expect_refused up "model.safetensors.index.json" "not a shard file name" "weight_map."
copy ext
sed -i 's/model-00002-of-000003.safetensors/model-00002-of-000003.bin/' "$t/ext/model.safetensors.index.json"
expect_refused ext "not a shard file name"
copy gone
sed -i 's/model-00002-of-000003.safetensors/elsewhere.safetensors/' "$t/gone/model.safetensors.index.json"
expect_refused gone "elsewhere.safetensors"
echo "ok: shard names"

#!/usr/bin/env bash
# doctor and a checkpoint's SHA256SUMS: with nothing installed it checks the bundled model that
# run, chat and serve then use (ok, exit 0: not "NOT USABLE ... run deltafin setup"); --verify
# hashes every file SHA256SUMS lists; one changed byte in a shard, a missing file or a malformed
# SHA256SUMS is reported naming the file, with exit 1 (a checkpoint given with -m too).
set -euo pipefail
t="$DF_TEST_TMP/doctor_sums"
rm -rf "$t"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
unset DELTAFIN_ROOT
export XDG_CACHE_HOME="$t/xdg-empty"

# a build tree of its own with a bundled model that ships SHA256SUMS, as models/k3-mini does
mkdir -p "$t/tree/build" "$t/tree/models"
cp "$DF" "$t/tree/build/deltafin"
b="$t/tree/models/k3-mini"
"$DF" synth --preset tiny --seed 6 --out "$b" --quiet
(cd "$b" && sha256sum -- * >SHA256SUMS)
df="$t/tree/build/deltafin"

# expect STATUS COMMAND...: stdout in $t/out
expect() {
    local want="$1" rc=0
    shift
    "$@" >"$t/out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, wanted $want: $(cat "$t/out")"
}
says() { grep -qF -- "$1" "$t/out" || fail "doctor does not say '$1': $(cat "$t/out")"; }

expect 0 "$df" doctor
says "no install in $t/xdg-empty/deltafin (deltafin setup puts K3 there); run, chat and serve use the bundled model: $b"
says "SHA256SUMS lists 8 files (doctor --verify hashes them)"
if grep -q "NOT USABLE" "$t/out"; then fail "doctor: NOT USABLE with a working bundled model: $(cat "$t/out")"; fi
expect 0 "$df" doctor --verify
says "SHA256SUMS: all 8 files it lists verified"
tail -1 "$t/out" | grep -qx ok || fail "doctor --verify does not end with ok: $(tail -1 "$t/out")"

# one changed byte in the middle of a shard: named, exit 1 (without --verify sizes cannot tell)
cp -r "$b" "$t/flip"
"$PYTHON" - "$t/flip/model-00002-of-000003.safetensors" <<'EOF'
import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(os.path.getsize(p) // 2)
    c = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([c[0] ^ 1]))
EOF
expect 1 "$DF" doctor -m "$t/flip" --verify
says "BAD model-00002-of-000003.safetensors: its SHA-256 is "
says "NOT USABLE"
expect 0 "$DF" doctor -m "$t/flip"

# a file SHA256SUMS lists that is not there
cp -r "$b" "$t/gone"
rm "$t/gone/generation_config.json"
expect 1 "$DF" doctor -m "$t/gone" --verify
says "BAD generation_config.json: "

# garbage in SHA256SUMS: refused even without --verify
cp -r "$b" "$t/garbage"
printf 'this is not a checksum list\n' >"$t/garbage/SHA256SUMS"
expect 1 "$DF" doctor -m "$t/garbage"
says 'BAD SHA256SUMS: line 1 is not "<SHA-256>  <file name>"'
printf '%064d  ../etc/passwd\n' 0 >"$t/garbage/SHA256SUMS"
expect 1 "$DF" doctor -m "$t/garbage" --verify
says "BAD SHA256SUMS: line 1"
: >"$t/garbage/SHA256SUMS"
expect 1 "$DF" doctor -m "$t/garbage"
says "BAD SHA256SUMS: it lists no file"
echo PASS

#!/usr/bin/env bash
# An install keeps to its source. Two nginx mirrors on loopback serve two checkpoints of the same
# layout (A and B, other weights). A streaming install made from A, with the host setting unset
# later, fetches its missing experts from A (the recorded source) and computes A's logits; with
# the host (or path) setting naming B, fetching is refused with one line naming both sources,
# nothing is asked of B and nothing recorded, and doctor reports the mismatch; a complete install
# still runs. `setup` with B moves the install to B, fetching again every file nothing ties to B;
# a mirror publishing the same SHA-256s (the fault server) ties the files and nothing is fetched
# again.
source "$(dirname "$0")/install_lib.sh"
set -o pipefail
T="$DF_TEST_TMP/inst_source"; rm -rf "$T"; mkdir -p "$T"
expect() { grep -q -- "$1" "$2" || { cat "$2"; fail "${3:-expected '$1'}"; }; }
expect_not() { if grep -q -- "$1" "$2"; then cat "$2"; fail "${3:-unexpected '$1'}"; fi; }
shard_gets() { awk '$7 ~ /safetensors/' "$1/access.log" | wc -l; } # nginx conf dir

make_source "$T/a" small 7; A="$SRC"
make_source "$T/b" small 8; B="$SRC"
TOKENS="5 17 42 99 7"
"$DF" logits --model "$A" --tokens "$TOKENS" --out "$T/a.f32" 2>/dev/null || fail "logits of A"
"$DF" logits --model "$B" --tokens "$TOKENS" --out "$T/b.f32" 2>/dev/null || fail "logits of B"
if cmp -s "$T/a.f32" "$T/b.f32"; then fail "the two checkpoints give the same logits"; fi
DF_TEST_TMP="$T/na" start_nginx "$T/a/www"; HA="$K3_HF_HOST"
DF_TEST_TMP="$T/nb" start_nginx "$T/b/www"; HB="$K3_HF_HOST"
unset K3_HF_HOST
RA="$HA/moonshotai/Kimi-K3" RB="$HB/moonshotai/Kimi-K3"

R="$T/r"
K3_HF_HOST="$HA" "$DF" setup --stream --root "$R" >"$T/setup.out" 2>&1 || { cat "$T/setup.out"; fail "setup from A"; }
grep -q "^source $RA$" "$R/deltafin-manifest.txt" || fail "the manifest does not record A"

echo "== the host setting unset: the install's own source"
"$DF" logits --model "$R" --tokens "$TOKENS" --out "$T/r.f32" 2>"$T/unset.err" || { cat "$T/unset.err"; fail "logits with the host unset"; }
cmp "$T/r.f32" "$T/a.f32" || fail "with the host unset the install did not compute A's logits"
[ "$(shard_gets "$T/na/nginx")" -gt 5 ] || fail "no expert was fetched from A"
[ "$(shard_gets "$T/nb/nginx")" -eq 0 ] || fail "B was asked for something"
SRC="$A" check_install "$R" >/dev/null || fail "the install holds bytes that are not A's"
"$DF" fetch --root "$R" --layers 2 >"$T/fetch.out" 2>&1 || { cat "$T/fetch.out"; fail "fetch with the host unset"; }
"$DF" doctor --root "$R" >"$T/doc.out" 2>&1 || { cat "$T/doc.out"; fail "doctor with the host unset"; }
expect "^source: $RA$" "$T/doc.out"
expect_not "MISMATCH" "$T/doc.out"

echo "== the host setting naming another mirror: refused, naming both"
before=$("$PYTHON" "$TOOLS/check_install.py" "$R" "$A")
refused() { # what, command...: fails, with one line naming both sources and what to do
    local what="$1"; shift
    if K3_HF_HOST="$HB" "$@" >"$T/b.out" 2>&1; then cat "$T/b.out"; fail "$what from B succeeded"; fi
    expect "^deltafin: .*$R was installed from $RA (revision main); K3_HF_HOST names $RB: refusing to fetch" "$T/b.out" \
        "$what: the refusal does not name both sources"
    expect "unset K3_HF_HOST to fetch from $RA" "$T/b.out"
    [ "$(grep -c "refusing to fetch" "$T/b.out")" -eq 1 ] || { cat "$T/b.out"; fail "$what: not one line"; }
}
echo '{"1": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}' >"$T/trace"
refused logits "$DF" logits --model "$R" --tokens "1 2 3 4 5 6 7 8 9 10" --out "$T/x.f32"
refused fetch "$DF" fetch --root "$R"
refused warm "$DF" warm --root "$R" --trace "$T/trace"
[ "$(shard_gets "$T/nb/nginx")" -eq 0 ] || fail "B was asked for shard bytes"
after=$("$PYTHON" "$TOOLS/check_install.py" "$R" "$A") || fail "after the refusals: $after"
[ "$before" = "$after" ] || fail "the refusals changed the install ($before -> $after)"
if K3_HF_HOST="$HB" "$DF" doctor --root "$R" >"$T/docb.out" 2>&1; then cat "$T/docb.out"; fail "doctor passed with another source"; fi
expect "^MISMATCH $R was installed from $RA" "$T/docb.out"
expect "NOT USABLE" "$T/docb.out"
# another repository on the same host is another source too
if K3_HF_PATH=other/model "$DF" fetch --root "$R" >"$T/path.out" 2>&1; then fail "fetch from another repository"; fi
expect "K3_HF_PATH names $HA/other/model: refusing" "$T/path.out"

echo "== a complete install runs whatever the settings name"
RF="$T/rf"
K3_HF_HOST="$HA" "$DF" setup --full --root "$RF" >/dev/null 2>&1 || fail "full setup from A"
K3_HF_HOST="$HB" "$DF" logits --model "$RF" --tokens "$TOKENS" --out "$T/rf.f32" 2>"$T/rf.err" || { cat "$T/rf.err"; fail "a full install with another host set"; }
cmp "$T/rf.f32" "$T/a.f32" || fail "the full install's logits"
K3_HF_HOST="$HB" "$DF" doctor --root "$RF" >"$T/docf.out" 2>&1 || { cat "$T/docf.out"; fail "doctor on a full install with another host set"; }
expect "^note: $RF was installed from $RA.*(the install is complete: nothing is fetched)" "$T/docf.out"

echo "== setup with the other mirror moves the install there"
K3_HF_HOST="$HB" "$DF" setup --stream --root "$R" >"$T/move.out" 2>&1 || { cat "$T/move.out"; fail "setup from B"; }
expect "was installed from $RA; the settings name $RB: moving the install there" "$T/move.out"
expect "nothing ties the bytes installed from $RA to $RB: fetching it again" "$T/move.out"
grep -q "^source $RB$" "$R/deltafin-manifest.txt" || fail "the manifest does not record B"
SRC="$B" check_install "$R" >/dev/null || fail "after the move the install holds bytes that are not B's"
"$DF" logits --model "$R" --tokens "$TOKENS" --out "$T/r2.f32" 2>"$T/r2.err" || { cat "$T/r2.err"; fail "logits after the move"; }
cmp "$T/r2.f32" "$T/b.f32" || fail "after the move the install does not compute B"
SRC="$B" check_install "$R" >/dev/null || fail "fetched after the move: bytes that are not B's"

echo "== mirrors that publish the same SHA-256s tie the files: nothing is fetched again"
start_faults "$A" --publish-sha; H1="$K3_HF_HOST"
RS="$T/rs"
"$DF" setup --stream --root "$RS" >/dev/null 2>&1 || fail "setup from the first hashing mirror"
"$DF" fetch --root "$RS" --layers 1-2 >/dev/null 2>&1 || fail "fetch from the first hashing mirror"
start_faults "$A" --publish-sha; H2="$K3_HF_HOST"
[ "$H1" != "$H2" ] || fail "the two mirrors share a port"
K3_HF_HOST="$H2" "$DF" setup --stream --root "$RS" >"$T/tie.out" 2>&1 || { cat "$T/tie.out"; fail "setup from the second hashing mirror"; }
expect "moving the install there" "$T/tie.out"
expect_not "fetching it again" "$T/tie.out"
expect "0 B to fetch" "$T/tie.out"
SRC="$A" check_install "$RS" >/dev/null || fail "the tied install"
echo ok

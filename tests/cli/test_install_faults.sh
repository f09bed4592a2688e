#!/usr/bin/env bash
# Installs against a server that misbehaves on purpose. For each fault, a run without retries
# fails with a clear message and records only correct bytes; the rerun completes and the install
# is byte-identical to the source. With retries, transient faults are absorbed within one run.
source "$(dirname "$0")/install_lib.sh"
T="$DF_TEST_TMP/inst_faults"; rm -rf "$T"; mkdir -p "$T"
make_source "$T"
export K3_FETCH_CHUNK_KB=256 K3_FETCH_PARALLEL=2
# the error paths run under the sanitizers when that build exists
DFI="$DF"; [ -x "${DF_ASAN:-}" ] && DFI="$DF_ASAN"

# fault_case KIND EXPECTED_MESSAGE [server options]: the 12th shard range request misbehaves
# (after the 10 header requests, inside the data).
fault_case() {
    local kind="$1" msg="$2"; shift 2
    local R="$T/root.$kind"
    start_faults "$SRC" --faults "$kind@12" "$@"
    if K3_FETCH_RETRIES=0 "$DFI" setup --full --root "$R" >"$T/$kind.1" 2>&1; then
        cat "$T/$kind.1"; fail "$kind: the first run should fail"
    fi
    expect_grep -- "$msg" "$T/$kind.1" || fail "$kind: expected '$msg'"
    quietly check_install "$R" || fail "$kind: recorded bytes differ from the source after the fault"
    K3_FETCH_RETRIES=0 "$DFI" setup --full --root "$R" >"$T/$kind.2" 2>&1 || { cat "$T/$kind.2"; fail "$kind: rerun failed"; }
    quietly check_install "$R" --full || fail "$kind: install differs from the source after the rerun"
    expect_grep ":$kind" "$FLOG" || fail "$kind: the fault was never injected"
    stop_faults
    echo "ok $kind"
}

fault_case drop "received\|Transferred a partial file\|connection\|Connection"
fault_case 500 "HTTP 500"
fault_case 503 "HTTP 503"
fault_case full200 "200 with the whole file instead of 206"
# a server that ignores Range will keep doing so: refused at once, never retried
start_faults "$SRC" --faults "full200@12"
if K3_FETCH_RETRIES=4 "$DFI" setup --full --root "$T/root.full200r" >"$T/full200r.out" 2>&1; then fail "full200 with retries must fail"; fi
expect_grep "does not support range requests" "$T/full200r.out" || fail "full200 message"
expect_no_grep "retrying" "$T/full200r.out" || fail "a 200 to a range request was retried"
stop_faults
fault_case badlen "Content-Length"
fault_case stall "Timeout\|timed out\|too slow"  --stall-s 30
fault_case resize "changed on the server"
# a corrupted byte with a correct length: only the published SHA-256 can tell
fault_case corrupt "does not match the published" --publish-sha

# with retries, every transient fault is absorbed in one run
start_faults "$SRC" --faults "drop@12,503@15x2,badlen@25,stall@30,500@33" --stall-s 30
R="$T/root.retry"
K3_FETCH_RETRIES=4 "$DFI" setup --full --root "$R" >"$T/retry.out" 2>&1 || { cat "$T/retry.out"; fail "retries did not absorb the faults"; }
[ "$(grep -c "retrying in" "$T/retry.out")" -ge 5 ] || { cat "$T/retry.out"; fail "expected at least 5 retries"; }
quietly check_install "$R" --full || fail "retry install differs from the source"
stop_faults

# a permanent error is reported clearly, without retrying for ever
start_faults "$SRC"
K3_HF_PATH=someone/Missing "$DFI" setup --root "$T/root.404" >"$T/404.out" 2>&1 && fail "a missing repository must fail"
expect_grep "HTTP 404 (not found: check K3_HF_HOST, K3_HF_PATH" "$T/404.out" || fail "404 message"
expect_no_grep "retrying" "$T/404.out" || fail "a 404 must not be retried"
# HF_TOKEN is sent as a bearer token
HF_TOKEN=hf_test123 quietly "$DFI" setup --stream --root "$T/root.tok" || fail "setup with a token"
expect_grep "Bearer_hf_test123" "$FLOG" || fail "HF_TOKEN was not sent as a bearer token"

# Hugging Face's shape: resolve URLs of shards redirect (302) to a CDN URL, and the SHA-256 is
# published on the redirect; faults then hit the CDN's responses
start_faults "$SRC" --redirect --publish-sha --faults "503@14,drop@20" --retry-after 1
R="$T/root.redirect"
K3_FETCH_RETRIES=3 "$DFI" setup --full --root "$R" >"$T/redirect.out" 2>&1 || { cat "$T/redirect.out"; fail "install through redirects"; }
expect_grep "5 file(s) match the hash the source published" "$T/redirect.out" || fail "hashes published on the redirect were not verified"
expect_grep "^GET model-00001-of-000005.safetensors bytes=0-7 302" "$FLOG" || fail "no redirect happened"
for k in 503 drop; do expect_grep ":$k" "$FLOG" || fail "faults behind the redirect were not injected"; done
expect_grep "HTTP 503; retrying in 1.0 s" "$T/redirect.out" || fail "Retry-After was not honoured"
quietly check_install "$R" --full || fail "install through redirects differs from the source"
# later requests for a shard go straight to the CDN URL (also when retrying): one redirect per shard
redirects=$(grep -c " 302 " "$FLOG")
[ "$redirects" -eq 5 ] || fail "$redirects redirects for 5 shards (redirect targets not reused)"
stop_faults
# a CDN URL that expired (403) sends the request back to the resolve URL, without using a retry
start_faults "$SRC" --redirect --faults "forbid@14"
K3_FETCH_RETRIES=0 "$DFI" setup --full --root "$T/root.expired" >"$T/expired.out" 2>&1 || { cat "$T/expired.out"; fail "expired CDN URL"; }
expect_grep ":forbid" "$FLOG" || fail "the expiry was not injected"
quietly check_install "$T/root.expired" --full || fail "install after an expired URL differs from the source"
stop_faults

# a shard that changed upstream between runs (same size, new bytes): the published SHA-256 differs
# from the one recorded, so the rerun fetches that shard again and matches the new source
R="$T/root.changed"
start_faults "$SRC" --publish-sha
"$DFI" setup --full --root "$R" >"$T/changed.1" 2>&1 || { cat "$T/changed.1"; fail "install before the change"; }
stop_faults
"$PYTHON" - "$SRC/model-00003-of-000005.safetensors" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) - 100); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0xff]))
PY
start_faults "$SRC" --publish-sha
"$DFI" setup --full --root "$R" >"$T/changed.2" 2>&1 || { cat "$T/changed.2"; fail "rerun after the change"; }
expect_grep "model-00003-of-000005.safetensors changed on the server" "$T/changed.2" || fail "change not reported"
quietly check_install "$R" --full || fail "install differs from the changed source"
[ "$(grep -c '^GET model-0000[1245].* 206' "$FLOG")" -eq 8 ] || fail "unchanged shards were fetched again"
stop_faults
echo ok

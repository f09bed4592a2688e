#!/usr/bin/env bash
# A hostile or unlucky mirror, on loopback: the repository changes between setup and later
# fetches (with a revision API and commits, with ETags only, with nothing), metadata and shards
# arrive damaged (with and without published hashes), ranges come back wrong, connections drop
# and stall while experts are fetched on demand, the source cannot be reached, K3_OFFLINE=1.
# Each case checks the outcome against the source's own bytes (tests/tools/check_install.py) and
# the logits of the source itself.
source "$(dirname "$0")/install_lib.sh"
T="$DF_TEST_TMP/hostile"; rm -rf "$T"; mkdir -p "$T"
export K3_FETCH_CHUNK_KB=256 K3_FETCH_PARALLEL=2 K3_FETCH_RETRIES=0
DFI="$DF"; [ -x "${DF_ASAN:-}" ] && DFI="$DF_ASAN"
# two revisions of one repository: the same layout and metadata, other weights
make_source "$T/a" small 7; A="$SRC"
make_source "$T/b" small 8; B="$SRC"
touch -d "2024-01-01 00:00:00" "$B"/*  # nginx's ETags have one-second resolution
CA=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa CB=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
TOKENS="5 17 42 99 7"
"$DF" logits --model "$A" --tokens "$TOKENS" --out "$T/a.f32" || fail "logits of revision A"
"$DF" logits --model "$B" --tokens "$TOKENS" --out "$T/b.f32" || fail "logits of revision B"
cmp -s "$T/a.f32" "$T/b.f32" && fail "the two revisions give the same logits"

echo "== revision change, Hugging Face style: the install stays on its commit"
SRC="$A"
start_faults "$A" --api --commit $CA --rev $CA="$A"
R="$T/r.api"
"$DFI" setup --stream --root "$R" >"$T/api.1" 2>&1 || { cat "$T/api.1"; fail "setup (api)"; }
expect_grep -- "revision main is commit aaaaaaaaaaaa: every file is fetched at this commit" "$T/api.1"
expect_grep -- "revision: main at commit aaaaaaaaaaaa (pinned" "$T/api.1"
# upstream main moves to B; A stays reachable by its commit
restart_faults "$B" --api --commit $CB --rev $CA="$A"
"$DFI" logits --model "$R" --tokens "$TOKENS" --out "$T/api.f32" 2>"$T/api.2" || { cat "$T/api.2"; fail "logits after main moved"; }
cmp "$T/api.f32" "$T/a.f32" || fail "after main moved, the install computed with other weights than its commit's"
[ "$(awk '$1 == "GET" && $2 ~ /safetensors/ && $6 != "'$CA'"' "$FLOG" | wc -l)" -eq 0 ] || { cat "$FLOG"; fail "fetches not pinned to the commit"; }
expect_grep "safetensors .* $CA" "$FLOG" || fail "no expert was fetched on demand"
quietly check_install "$R" || fail "the pinned install holds bytes that are not its commit's"
# setup again follows main to B: what changed is fetched again, and the install becomes B
"$DFI" setup --stream --root "$R" >"$T/api.3" 2>&1 || { cat "$T/api.3"; fail "setup after main moved"; }
expect_grep -- "main moved from commit aaaaaaaaaaaa to bbbbbbbbbbbb" "$T/api.3"
"$DFI" fetch --root "$R" >"$T/api.4" 2>&1 || { cat "$T/api.4"; fail "fetch of B"; }
SRC="$B" quietly check_install "$R" --full || fail "the updated install differs from B"
expect_grep -- "10 file(s) match the hash the source published" "$T/api.4"
stop_faults

echo "== revision change behind a plain mirror with ETags: refused, never mixed"
mirror="$T/m/www/moonshotai/Kimi-K3/resolve/main"; mkdir -p "$(dirname "$mirror")"
cp -a "$A" "$mirror"
for server in faults nginx; do
    R="$T/r.etag.$server"
    rm -rf "$mirror"; cp -a "$A" "$mirror"
    if [ $server = faults ]; then start_faults "$mirror"; else start_nginx "$T/m/www"; fi
    "$DFI" setup --stream --root "$R" >"$T/etag.1" 2>&1 || { cat "$T/etag.1"; fail "setup ($server)"; }
    expect_grep -- "not pinned to a commit (the source names none): files are tied to it by" "$T/etag.1"
    rm -rf "$mirror"; cp -a "$B" "$mirror"  # the mirror now serves B at the same URLs
    if "$DFI" logits --model "$R" --tokens "$TOKENS" --out "$T/etag.f32" 2>"$T/etag.2"; then
        fail "$server: logits mixed two revisions and exited 0"
    fi
    expect_grep -- "another version of this file .*refusing to mix versions" "$T/etag.2"
    SRC="$A" quietly check_install "$R" || fail "$server: bytes of the new revision were recorded"
    "$DFI" setup --stream --root "$R" >"$T/etag.3" 2>&1 || { cat "$T/etag.3"; fail "$server: setup to update"; }
    expect_grep -- "changed on the server: fetching it again" "$T/etag.3"
    "$DFI" logits --model "$R" --tokens "$TOKENS" --out "$T/etag.f32" || fail "$server: logits after the update"
    cmp "$T/etag.f32" "$T/b.f32" || fail "$server: the updated install does not compute B"
    if [ $server = faults ]; then stop_faults; else kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; fi
    echo "ok $server"
done

echo "== a mirror with no commit, no ETag, no hash: said plainly"
start_faults "$A" --etag none
R="$T/r.bare"
"$DFI" setup --stream --root "$R" >"$T/bare.1" 2>&1 || { cat "$T/bare.1"; fail "setup (bare)"; }
expect_grep -- "5 shard(s) have no ETag or published hash: bytes fetched for them later are checked by size only" "$T/bare.1"
"$DFI" doctor --root "$R" >"$T/bare.2" 2>&1 || { cat "$T/bare.2"; fail "doctor (bare)"; }
expect_grep -- "checked by size only" "$T/bare.2"
stop_faults

echo "== damaged metadata"
SRC="$A"
for case in "tiktoken.model=garble::tiktoken.model:" "config.json=truncate::config.json" \
            "tiktoken.model=flip:--api --commit $CA:tiktoken.model: git blob SHA-1"; do
    IFS=: read -r fault opts msg rest <<<"$case"
    msg="$msg${rest:+:$rest}"
    R="$T/r.meta.${fault%%=*}.${fault##*=}"
    start_faults "$A" --meta-fault "$fault" $opts
    if "$DFI" setup --stream --root "$R" >"$T/meta.out" 2>&1; then cat "$T/meta.out"; fail "$fault: setup accepted it"; fi
    expect_grep -- "$msg" "$T/meta.out" || fail "$fault: the message does not name the file"
    [ ! -e "$R" ] || [ -z "$(ls -A "$R")" ] || { ls "$R"; fail "$fault: a refused setup wrote files"; }
    expect_grep ":${fault##*=}" "$FLOG" || fail "$fault: not injected"
    stop_faults
    echo "ok $fault"
done
# damaged after the install: doctor tells by the SHA-256 recorded when the file was fetched
start_faults "$A"
R="$T/r.local"
quietly "$DFI" setup --stream --root "$R" || fail "setup (local damage)"
stop_faults
"$PYTHON" - "$R/tiktoken.model" <<'PY'
import sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); i = d.index(b"\n", len(d) // 2) + 1
d[i] = ord("A") if d[i] != ord("A") else ord("B"); open(p, "wb").write(d)
PY
if "$DFI" doctor --root "$R" >"$T/local.out" 2>&1; then cat "$T/local.out"; fail "doctor accepted a damaged tokenizer"; fi
expect_grep -- "tiktoken.model: SHA-256 .* differs from the .* recorded when it was fetched" "$T/local.out"
expect_grep -- "NOT USABLE" "$T/local.out"
# nothing recorded to compare with (a checkpoint without a manifest): doctor parses the tokenizer itself
cp -r "$A" "$T/plain"
"$PYTHON" - "$T/plain/tiktoken.model" <<'PY'
import sys
p = sys.argv[1]; lines = open(p, "rb").read().split(b"\n"); lines[300] = b"!" + lines[300][1:]
open(p, "wb").write(b"\n".join(lines))
PY
if "$DFI" doctor --root "$T/plain" >"$T/plain.out" 2>&1; then cat "$T/plain.out"; fail "doctor accepted a garbled tokenizer"; fi
expect_grep -- "BAD tokenizer: .*tiktoken.model:301" "$T/plain.out"
expect_grep -- "NOT USABLE" "$T/plain.out"

echo "== damaged shards: every bad one found in one run"
for how in "--publish-sha" "--api --commit $CA"; do
    start_faults "$A" --faults "corrupt@12,corrupt@30,corrupt@53,corrupt@70" $how
    R="$T/r.corrupt.${how%% *}"
    if K3_FETCH_PARALLEL=1 "$DFI" setup --full --root "$R" >"$T/corrupt.1" 2>&1; then cat "$T/corrupt.1"; fail "corrupted shards accepted ($how)"; fi
    [ "$(grep -c "does not match the published" "$T/corrupt.1")" -eq 4 ] || { cat "$T/corrupt.1"; fail "not all four bad shards named ($how)"; }
    expect_grep -- "4 shard(s) do not match their published SHA-256" "$T/corrupt.1"
    quietly check_install "$R" || fail "bytes of a bad shard are still recorded ($how)"
    restart_faults "$A" $how
    "$DFI" setup --full --root "$R" >"$T/corrupt.2" 2>&1 || { cat "$T/corrupt.2"; fail "second run ($how)"; }
    quietly check_install "$R" --full || fail "two runs did not repair four bad shards ($how)"
    refetched=$(awk '$1 == "GET" && $2 ~ /safetensors/ && $4 == 206 {print $2}' "$FLOG" | sort -u | wc -l)
    [ "$refetched" -eq 5 ] || fail "the second run fetched $refetched shards, expected the 4 bad ones and the headers"
    stop_faults
    echo "ok $how"
done
# without a published hash the same damage cannot be seen: setup and doctor say what was checked
start_faults "$A" --faults "corrupt@12"
R="$T/r.corrupt.nohash"
K3_FETCH_PARALLEL=1 "$DFI" setup --full --root "$R" >"$T/nohash.1" 2>&1 || { cat "$T/nohash.1"; fail "setup (no hash)"; }
expect_grep ":corrupt" "$FLOG" || fail "no hash: not injected"
expect_grep -- "10 file(s) have no published hash: only their sizes were checked" "$T/nohash.1"
"$DFI" doctor --root "$R" >"$T/nohash.2" 2>&1 || true
expect_grep -- "no published hash: size checked" "$T/nohash.2"
expect_no_grep -- "SHA-256 verified" "$T/nohash.2"
stop_faults

echo "== wrong ranges"
start_faults "$A" --faults "wrongrange@12"
R="$T/r.range"
if "$DFI" setup --full --root "$R" >"$T/range.1" 2>&1; then fail "a wrong range was accepted"; fi
expect_grep -- "asked for bytes .* server sent" "$T/range.1"
quietly check_install "$R" || fail "bytes of a wrong range were recorded"
restart_faults "$A" --faults "wrongrange@3"
K3_FETCH_RETRIES=2 K3_FETCH_BACKOFF_MS=10 "$DFI" setup --full --root "$R" >"$T/range.2" 2>&1 || { cat "$T/range.2"; fail "retry after a wrong range"; }
quietly check_install "$R" --full || fail "install after a wrong range"
stop_faults

echo "== drops and stalls while experts are fetched on demand"
start_faults "$A"
R="$T/r.ondemand"
quietly "$DFI" setup --stream --root "$R" || fail "setup (on demand)"
restart_faults "$A" --faults "drop@2,stall@5,503@8,drop@12" --stall-s 30
K3_FETCH_RETRIES=3 K3_FETCH_BACKOFF_MS=10 K3_FETCH_STALL_TIMEOUT=1 "$DFI" logits --model "$R" --tokens "$TOKENS" \
    --out "$T/od.f32" 2>"$T/od.err" || { cat "$T/od.err"; fail "on-demand logits through drops and stalls"; }
cmp "$T/od.f32" "$T/a.f32" || fail "on-demand logits differ from the source's"
for k in drop stall 503; do expect_grep ":$k" "$FLOG" || fail "$k not injected"; done
quietly check_install "$R" || fail "on-demand fetches recorded wrong bytes"
stop_faults

echo "== an unreachable source, and K3_OFFLINE=1"
closed=$(free_port)
t0=$SECONDS
if K3_HF_HOST=http://127.0.0.1:$closed K3_FETCH_RETRIES=6 "$DFI" setup --dry-run --root "$T/r.none" >"$T/none.out" 2>&1; then fail "dry run against nothing"; fi
[ $((SECONDS - t0)) -le 5 ] || fail "a refused connection took $((SECONDS - t0)) s to report"
expect_grep -- "setup --dry-run: cannot reach the source: .*is the mirror running" "$T/none.out"
expect_no_grep -- "retrying" "$T/none.out"
t0=$SECONDS
if K3_HF_HOST=no-such-mirror.invalid K3_FETCH_RETRIES=6 "$DFI" setup --dry-run --root "$T/r.none" >"$T/dns.out" 2>&1; then fail "dry run against a name that does not resolve"; fi
[ $((SECONDS - t0)) -le 15 ] || fail "a host name that does not resolve took $((SECONDS - t0)) s to report"
expect_grep -- "check K3_HF_HOST" "$T/dns.out"
expect_no_grep -- "retrying" "$T/dns.out"
start_faults "$A"
"$DFI" setup --dry-run --stream --root "$T/r.plan" >"$T/plan.out" 2>&1 || { cat "$T/plan.out"; fail "dry run"; }
expect_grep -- "plan: streaming install" "$T/plan.out"
expect_grep -- "disk needed:" "$T/plan.out"
[ ! -e "$T/r.plan" ] || fail "a dry run wrote files"
R="$T/r.offline"
quietly "$DFI" setup --stream --root "$R" || fail "setup (offline)"
stop_faults
for cmd in "setup --stream" "fetch" "warm --trace /dev/null"; do
    if K3_OFFLINE=1 "$DFI" $cmd --root "$R" >"$T/off.out" 2>&1; then fail "K3_OFFLINE=1 $cmd succeeded"; fi
    expect_grep -- "K3_OFFLINE=1: .* needs the network" "$T/off.out"
done
K3_OFFLINE=1 "$DFI" setup --dry-run --root "$R" >"$T/off.plan" 2>&1 || { cat "$T/off.plan"; fail "K3_OFFLINE=1 setup --dry-run"; }
expect_grep -- "the source was not consulted (K3_OFFLINE=1): the plan is what the local install lacks" "$T/off.plan"
if K3_OFFLINE=1 "$DFI" logits --model "$R" --tokens "$TOKENS" --out "$T/off.f32" 2>"$T/off.err"; then fail "K3_OFFLINE=1 logits"; fi
expect_grep -- "fetching is off (K3_OFFLINE=1): run .deltafin fetch --root $R" "$T/off.err"
expect_no_grep -- "installer opened without a source" "$T/off.err"
echo ok

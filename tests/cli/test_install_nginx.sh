#!/usr/bin/env bash
# Installs from nginx on loopback serving a synth checkpoint in Hugging Face's path layout:
# dry run writes nothing; a streaming install holds headers + spine (and no expert) and runs
# logits identically to the source once the experts the tokens route to are fetched (and only
# those: counted against the float64 reference's routing); fetch --layers, then fetch completes
# it byte-identical to the source; a rerun fetches nothing; doctor reports each state.
source "$(dirname "$0")/install_lib.sh"
T="$DF_TEST_TMP/inst_nginx"; rm -rf "$T"; mkdir -p "$T"
make_source "$T"
start_nginx "$T/www"
R="$T/root"

# dry run: a plan, no files
"$DF" setup --stream --dry-run --root "$R" >"$T/dry.out" 2>&1 || { cat "$T/dry.out"; fail "dry run failed"; }
expect_grep "plan: streaming install" "$T/dry.out" || fail "dry run printed no plan"
[ ! -e "$R" ] || fail "dry run created $R"

# disk space: no flag picks full when it fits, else streaming (saying what full needs); too
# little for either is refused before anything is written (reserve: 1% + 64 MiB)
K3_DISK_FREE_BYTES=200000000 "$DF" setup --dry-run --root "$R" >"$T/d1.out" 2>&1 || fail "dry run (roomy disk)"
expect_grep "plan: full install" "$T/d1.out" || fail "a roomy disk should get a full install"
K3_DISK_FREE_BYTES=85000000 "$DF" setup --dry-run --root "$R" >"$T/d2.out" 2>&1 || fail "dry run (small disk)"
expect_grep "a full install needs 20.82 MB more (20.82 MB in all) and 67.32 MB kept free, but 85.00 MB is free: installing in streaming mode" "$T/d2.out" \
    || fail "small disk: no streaming fallback message"
expect_grep "plan: streaming install" "$T/d2.out" || fail "small disk should get a streaming install"
expect_fail "21.39 MB to fetch and 67.32 MB to keep free, but only 85.00 MB free" \
    env K3_DISK_FREE_BYTES=85000000 "$DF" setup --full --root "$R"
[ ! -e "$R/model-00001-of-000005.safetensors" ] || fail "a refused install wrote a shard"

# streaming install: headers + spine
"$DF" setup --stream --root "$R" >"$T/setup.out" 2>&1 || { cat "$T/setup.out"; fail "setup --stream failed"; }
expect_grep "experts 0 of 288 local (streaming install)" "$T/setup.out" || fail "streaming summary"
expect_grep "deltafin fetch --root $R" "$T/setup.out" || fail "no fetch command in the summary"
quietly check_install "$R" || fail "streaming install differs from the source"
"$DF" doctor --root "$R" >"$T/doc1.out" || { cat "$T/doc1.out"; fail "doctor on a streaming install"; }
expect_grep "experts 0 of 288" "$T/doc1.out" || fail "doctor experts count"
# the spine is complete: no non-expert tensor byte is missing (reference: the source's headers)
"$PYTHON" - "$R" "$SRC" <<'PY' || fail "spine incomplete"
import json, struct, sys, os
root, src = sys.argv[1:3]
for name in sorted(os.listdir(src)):
    if not name.endswith(".safetensors"): continue
    with open(os.path.join(src, name), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; hdr = json.loads(f.read(n)); f.seek(0); a = f.read()
    with open(os.path.join(root, name), "rb") as f: b = f.read()
    assert a[:8 + n] == b[:8 + n], name
    for k, v in hdr.items():
        if k == "__metadata__" or ".experts." in k: continue
        s, e = v["data_offsets"]
        assert a[8 + n + s:8 + n + e] == b[8 + n + s:8 + n + e], k
PY

# rerun: nothing left to fetch for a streaming install
"$DF" setup --stream --root "$R" >"$T/setup2.out" 2>&1 || fail "second setup"
expect_grep "0 B to fetch in 0 requests" "$T/setup2.out" || fail "rerun fetched again"

# the experts a token sequence routes to (float64 reference), as a router trace
TOKENS="5 17 42 99 7"
"$PYTHON" "$HERE/../reference/k3_ref.py" --model "$SRC" --tokens "$TOKENS" --dump-routes "$T/routes" \
    || fail "reference run"
"$PYTHON" - "$T/routes" >"$T/router_trace.jsonl" <<'PY'
import json, sys, collections
by_pos = collections.OrderedDict()
for ln in open(sys.argv[1]):
    pos, layer, _margin, *pairs = ln.split()
    by_pos.setdefault(pos, {})[layer] = [int(p.split(":")[0]) for p in pairs]
for v in by_pos.values(): print(json.dumps(v))
PY
NEED=$("$PYTHON" -c "import json,sys; print(len({(l,e) for ln in open(sys.argv[1]) for l,v in json.loads(ln).items() for e in v}))" "$T/router_trace.jsonl")
"$DF" warm --root "$R" --trace "$T/router_trace.jsonl" --fetch 100000 >"$T/warm.out" 2>&1 || { cat "$T/warm.out"; fail "warm"; }
expect_grep "experts $NEED of 288 local" "$T/warm.out" || fail "warm should hold exactly the $NEED routed experts"
quietly check_install "$R" || fail "after warm: differs from the source"
"$DF" logits --model "$R" --tokens "$TOKENS" --out "$T/stream.f32" || fail "logits on the streaming install"
K3_TRACE="$T/engine_trace.jsonl" "$DF" logits --model "$SRC" --tokens "$TOKENS" --out "$T/source.f32" \
    || fail "logits on the source"
# the engine's own routing (its K3_TRACE format) needs nothing the reference's routing did not fetch
"$DF" warm --root "$R" --trace "$T/engine_trace.jsonl" --dry-run >"$T/warm2.out" 2>&1 || { cat "$T/warm2.out"; fail "warm --dry-run"; }
expect_grep "0 missing experts were used" "$T/warm2.out" || fail "the engine routes to experts not fetched"
cmp "$T/stream.f32" "$T/source.f32" || fail "streaming install logits differ from the source's"
echo "streaming install: $NEED of 288 experts fetched for a 5-token sequence; logits identical"

# on-demand API (installer_fetch_expert): 40 experts, each asked for twice by 8 concurrent
# threads, cost exactly 40 requests, and every fetched byte equals the source
R2="$T/root2"
quietly "$DF" setup --stream --root "$R2" || fail "second streaming install"
before=$(wc -l <"$DF_TEST_TMP/nginx/access.log")
"$(dirname "$DF")/bench/bench_expert_fetch" "$R2" 40 8 --dup >"$T/ondemand.out" || { cat "$T/ondemand.out"; fail "on-demand fetch"; }
after=$(wc -l <"$DF_TEST_TMP/nginx/access.log")
expect_grep "experts=40 requests=80 .* not_recorded=0" "$T/ondemand.out" || fail "on-demand summary"
expect_grep "streaming install: 40 of 288 experts local (13.9%).*deltafin fetch --root $R2" "$T/ondemand.out" \
    || fail "start-up reminder"
[ $((after - before)) -eq 40 ] || fail "on-demand: $((after - before)) requests for 40 experts"
quietly check_install "$R2" || fail "on-demand fetch wrote bytes that differ from the source"
"$DF" doctor --root "$R2" | expect_grep "experts 40 of 288" || fail "doctor after on-demand fetches"

# run time, on demand: a fresh streaming install runs logits directly; the engine fetches exactly
# the experts the tokens route to (through both stores), results are identical to the source,
# and without network access a missing expert is an error, never zeros
for store in mapped stream; do
    R3="$T/root3-$store"
    quietly "$DF" setup --stream --root "$R3" || fail "streaming install for on-demand"
    if K3_OFFLINE=1 K3_STORE=$store "$DF" logits --model "$R3" --tokens "$TOKENS" --out "$T/off.f32" 2>"$T/off.err"; then
        fail "offline logits on a streaming install must fail"
    fi
    expect_grep "not installed\|could not be fetched\|does not hold" "$T/off.err" || fail "offline: unclear error"
    before=$(wc -l <"$DF_TEST_TMP/nginx/access.log")
    K3_STORE=$store "$DF" logits --model "$R3" --tokens "$TOKENS" --out "$T/od.f32" 2>"$T/od.err" || { cat "$T/od.err"; fail "on-demand logits ($store)"; }
    after=$(wc -l <"$DF_TEST_TMP/nginx/access.log")
    cmp "$T/od.f32" "$T/source.f32" || fail "on-demand logits ($store) differ from the source's"
    "$DF" doctor --root "$R3" | expect_grep "experts $NEED of 288" || fail "on-demand ($store): expected exactly $NEED experts local"
    [ $((after - before)) -le "$NEED" ] || fail "on-demand ($store): $((after - before)) requests for $NEED experts"
    quietly check_install "$R3" || fail "on-demand ($store) wrote bytes that differ from the source"
    echo "on-demand ($store): $NEED experts fetched in $((after - before)) requests; logits identical to the source"
done

# an install whose manifest is version 1 (written before revisions and ETags were recorded) is
# read, completed and rewritten as version 2
R4="$T/root4"
quietly "$DF" setup --stream --root "$R4" || fail "setup for the version 1 manifest"
"$PYTHON" - "$R4/deltafin-manifest.txt" "$K3_HF_HOST" <<'PY'
import sys
path, host = sys.argv[1:3]
out = ["deltafin-manifest 1", f"source {host}/moonshotai/Kimi-K3/resolve/main/"]
for ln in open(path).read().split("\n")[1:]:
    if ln.startswith("file "):
        _, name, size, whole, n, pub, local, verified, ident = ln.split()
        sha = pub.split(":", 1)[1] if pub.startswith("sha256:") else "-"
        out.append(f"file {name} {size} {sha} {whole} {verified if sha != '-' else 0} {n}")
    elif ln and not ln.startswith(("source ", "revision ")):
        out.append(ln)
open(path, "w").write("\n".join(out) + "\n")
PY
head -1 "$R4/deltafin-manifest.txt" | expect_grep "deltafin-manifest 1" || fail "no version 1 manifest to test"
"$DF" fetch --root "$R4" --layers 2 >"$T/v1.out" 2>&1 || { cat "$T/v1.out"; fail "fetch into a version 1 install"; }
expect_no_grep "was installed from" "$T/v1.out" || fail "a version 1 install was taken for another source's"
head -1 "$R4/deltafin-manifest.txt" | expect_grep "deltafin-manifest 2" || fail "the manifest was not rewritten as version 2"
quietly check_install "$R4" || fail "version 1 install after fetch differs from the source"

# some layers, then everything
"$DF" fetch --root "$R" --layers 2-3,5 >"$T/fetch1.out" 2>&1 || { cat "$T/fetch1.out"; fail "fetch --layers"; }
"$PYTHON" - "$R" "$SRC" "$T/router_trace.jsonl" <<'PY' || fail "fetch --layers: wrong set of experts present"
import json, os, re, struct, sys
root, src, trace = sys.argv[1:4]
ranges, cur = {}, None
for ln in open(root + "/deltafin-manifest.txt").read().split("\n")[1:]:
    if ln.startswith("file "): cur = ln.split()[1]; ranges[cur] = []
    elif ln and not ln.startswith(("source ", "revision ")): ranges[cur].append(tuple(map(int, ln.split())))
routed = {(int(l), e) for ln in open(trace) for l, v in json.loads(ln).items() for e in v}
for name in sorted(os.listdir(src)):
    if not name.endswith(".safetensors"): continue
    with open(os.path.join(src, name), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; hdr = json.loads(f.read(n))
    for k, v in hdr.items():
        m = re.search(r"layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.", k)
        if not m: continue
        l, e = int(m.group(1)), int(m.group(2))
        a, b = 8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]
        have = any(x <= a and b <= y for x, y in ranges[name])
        want = l in (2, 3, 5) or (l, e) in routed
        assert have == want, (k, have, want)
PY
"$DF" fetch --root "$R" --dry-run >"$T/fetch2d.out" 2>&1 || fail "fetch --dry-run"
"$DF" fetch --root "$R" >"$T/fetch2.out" 2>&1 || { cat "$T/fetch2.out"; fail "fetch"; }
expect_grep "(full install)" "$T/fetch2.out" || fail "fetch did not complete the install"
check_install "$R" --full || fail "full install differs from the source"
"$DF" doctor --root "$R" >"$T/doc2.out" || { cat "$T/doc2.out"; fail "doctor on a full install"; }
expect_grep "experts 288 of 288" "$T/doc2.out" || fail "doctor full count"

# doctor sees damage without the network: a truncated shard
unset K3_HF_HOST
truncate -s 1000 "$R/model-00002-of-000005.safetensors"
if "$DF" doctor --root "$R" >"$T/doc3.out" 2>&1; then cat "$T/doc3.out"; fail "doctor accepted a truncated shard"; fi
expect_grep "model-00002-of-000005.safetensors" "$T/doc3.out" || fail "doctor did not name the shard"
echo ok

#!/usr/bin/env bash
# The streaming store gives exactly the tokens and logits of the mapped (all-in-memory) path at
# every budget: everything resident, some layers pinned with a minimal expert cache, and so small
# that every layer streams (also with LFU, no prefetch, buffered reads, io_uring, and under ASan). K3_TRACE
# records the same router selections as the mapped path. A shard truncated or deleted during a
# run stops it with an error naming the file and byte range; a budget below the minimum is refused.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/stream"
m="$t/small"
"$DF" synth --preset small --seed 11 --out "$m" --quiet >/dev/null
prompt="5 17 300 42 42 42 7 1000 3 9 12 600 77 1 2 3 900 4 4 4 81"
lt="$(seq 3 11 700 | tr '\n' ' ')"

K3_STORE=mapped "$DF" run --model "$m" --tokens "$prompt" --max-new 24 >"$t/mapped.tok"
K3_STORE=mapped "$DF" logits --model "$m" --tokens "$lt" --out "$t/mapped.bin" --chunk 16
[ "$(wc -w <"$t/mapped.tok")" = 24 ] || fail "mapped run did not generate 24 tokens"

# The smallest budget with every layer streamed: the refusal says what it needs.
expect_fail "is below what this model needs" \
    env K3_STORE=stream K3_PIN_LAYERS=0 K3_RAM_GB=0.01 "$DF" run --model "$m" --tokens 1 --max-new 1
msg=$(cat "$EXPECT_OUT")
need=$(echo "$msg" | sed -n 's/.*pinned layers: \([0-9.]*\) MB.*/\1/p')
[ -n "$need" ] || fail "refusal does not say what is needed: $msg"
tight=$(awk -v n="$need" 'BEGIN { printf "%.6f", (n + 0.05) / 1000 }')

check() { # label, binary, env settings...
    local label="$1" bin="$2"; shift 2
    env K3_STORE=stream "$@" "$bin" run --model "$m" --tokens "$prompt" --max-new 24 --stats >"$t/s.tok" 2>"$t/s.err" ||
        { cat "$t/s.err"; fail "$label: run failed"; }
    cmp -s "$t/s.tok" "$t/mapped.tok" || fail "$label: tokens differ: $(cat "$t/s.tok") vs $(cat "$t/mapped.tok")"
    env K3_STORE=stream "$@" "$bin" logits --model "$m" --tokens "$lt" --out "$t/s.bin" --chunk 16 2>"$t/l.err" ||
        { cat "$t/l.err"; fail "$label: logits failed"; }
    cmp -s "$t/s.bin" "$t/mapped.bin" || fail "$label: logits differ"
    sed -n "s/^\(.*streaming:\)/$label: \1/p" "$t/s.err"
}
check resident "$DF" K3_RAM_GB=4
expect_grep "10/10 layers pinned" "$t/s.err" || fail "a 4 GB budget should pin every layer"
check pinned-4 "$DF" K3_RAM_GB=4 K3_PIN_LAYERS=4
expect_grep "4/10 layers pinned (.*), 6 streamed" "$t/s.err" || fail "K3_PIN_LAYERS=4 not applied"
check all-streamed "$DF" K3_RAM_GB="$tight" K3_PIN_LAYERS=0
expect_grep "0/10 layers pinned (.*), 10 streamed" "$t/s.err" || fail "tight budget should stream every layer"
expect_grep -E "expert cache 0.00 GB = [0-9]{1,2} x" "$t/s.err" || fail "tight budget should leave a minimal expert cache"
expect_grep "prefetch [1-9][0-9]* started" "$t/s.err" || fail "no prefetch under a minimal cache"
# The profile splits the expert wait: the waits for each layer's first expert are part of it.
K3_STORE=stream K3_RAM_GB="$tight" K3_PIN_LAYERS=0 "$DF" run --model "$m" --tokens "$prompt" --max-new 4 \
    --stats-json "$t/phases.json" >/dev/null 2>"$t/phases.err" || { cat "$t/phases.err"; fail "run with --stats-json failed"; }
"$PYTHON" - "$t/phases.json" <<'PY' || fail "phases.first_wait_s missing, zero or above expert_wait_s; or layer_pass not null on the CPU"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["phases"]
sys.exit(not (0 < p["first_wait_s"] <= p["expert_wait_s"] and "layer_pass" in j and j["layer_pass"] is None))
PY
check all-streamed-lfu-noprefetch-buffered "$DF" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_CACHE_POLICY=lfu K3_PREFETCH=0 K3_DIRECT=0
expect_grep "buffered" "$t/s.err" || fail "K3_DIRECT=0 not applied"
check all-streamed-one-io-thread "$DF" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_IO_THREADS=1
check all-streamed-uring "$DF" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_IO=uring
expect_grep "io_uring x8" "$t/s.err" || fail "K3_IO=uring not applied"
check all-streamed-uring-depth-1-buffered "$DF" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_IO=uring K3_IO_THREADS=1 K3_DIRECT=0
expect_fail "K3_IO: 'aio' is not threads or uring" env K3_STORE=stream K3_IO=aio "$DF" run --model "$m" --tokens 1 --max-new 1
expect_fail "K3_IO_THREADS: '0' is not a thread count in 1..256" \
    env K3_STORE=stream K3_IO_THREADS=0 "$DF" run --model "$m" --tokens 1 --max-new 1
# Peak RSS stays under the budget (the budget covers the process, not only the weights).
if [ -x /usr/bin/time ]; then
    K3_STORE=stream K3_RAM_GB="$tight" K3_PIN_LAYERS=0 /usr/bin/time -v "$DF" run --model "$m" --tokens "$prompt" --max-new 24 \
        >/dev/null 2>"$t/time.err"
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$t/time.err")
    awk -v r="$rss" -v b="$tight" 'BEGIN { exit !(r * 1024 < b * 1e9) }' || fail "peak RSS $rss kB over the $tight GB budget"
fi
check asan-all-streamed "$DF_ASAN" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_THREADS=2
check asan-all-streamed-uring "$DF_ASAN" K3_RAM_GB="$tight" K3_PIN_LAYERS=0 K3_THREADS=2 K3_IO=uring

# Router traces: one line per position, the same selections as the mapped path.
(cd "$t" && K3_TRACE=1 K3_STORE=stream K3_RAM_GB="$tight" K3_PIN_LAYERS=0 quietly "$DF" run --model "$m" --tokens "$prompt" --max-new 6)
K3_TRACE="$t/mapped.jsonl" K3_STORE=mapped quietly "$DF" run --model "$m" --tokens "$prompt" --max-new 6
cmp -s "$t/router_trace.jsonl" "$t/mapped.jsonl" || fail "router traces differ between stores"
"$PYTHON" - "$t/router_trace.jsonl" <<'PY' || fail "bad router trace"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 21 + 6 - 1, len(lines)              # prompt + generated - the last token
for i, l in enumerate(lines):
    assert l["pos"] == i
    assert sorted(map(int, l["layers"])) == list(range(1, 10)), l["layers"].keys()
    for ids in l["layers"].values():
        assert len(ids) == 4 and len(set(ids)) == 4 and all(0 <= e < 32 for e in ids)
PY

# A shard damaged while the model runs: a clear error, promptly, and no tokens after it.
damage() { # how (truncate|delete), shard, I/O backend
    rm -rf "$t/d" "$t/d.tok" && cp -r "$m" "$t/d" # no earlier run's tokens: they would start the damage early
    local f="$t/d/$2"
    K3_IO=$3 K3_STORE=stream K3_RAM_GB="$tight" K3_PIN_LAYERS=0 timeout 60 "$DF" run --model "$t/d" --tokens "5 17" --max-new 8000 \
        >"$t/d.tok" 2>"$t/d.err" &
    local pid=$!
    for _ in $(seq 100); do [ -s "$t/d.tok" ] && break; sleep 0.1; done
    [ -s "$t/d.tok" ] || fail "$1: generation did not start"
    if [ "$1" = truncate ]; then truncate -s $(($(stat -c %s "$f") / 2)) "$f"; else rm "$f"; fi
    local rc=0
    wait $pid || rc=$?
    [ $rc = 1 ] || { cat "$t/d.err"; fail "$1: exit status $rc, expected 1"; }
    expect_grep "deltafin: $f: .*bytes [0-9]*\.\.[0-9]*" "$t/d.err" || fail "$1: error does not name file and range"
    grep "deltafin: $f" "$t/d.err"
}
shards=$(cd "$m" && ls model-*.safetensors)
for io in threads uring; do
    damage truncate "$(echo "$shards" | sed -n 2p)" $io
    expect_grep "truncated to" "$t/d.err" || fail "$io: truncation not reported as such"
    damage delete "$(echo "$shards" | sed -n 3p)" $io
    expect_grep "deleted or replaced" "$t/d.err" || fail "$io: deletion not reported as such"
done
echo "stream: all budgets match the mapped path"

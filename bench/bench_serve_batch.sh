#!/usr/bin/env bash
# Batched decoding in the server: aggregate tokens/s and per-request latency with 1, 2, 4 and 8
# concurrent clients on a model streamed from disk (random weights: speed only). Each client
# sends its requests one after another (raw completions of distinct 16-token prompts, greedy,
# a fixed number of new tokens); the client counts are interleaved over several rounds (1 2 4 8,
# then 8 4 2 1, ...) and the table gives medians and each count's throughput relative to one
# client in the same round. The same is measured on a server with --parallel 1 (one generation
# at a time: what the server did before batching) for comparison.
# usage: bench/bench_serve_batch.sh [size-gb] [ram-gb] [rounds] [new-tokens] [requests-per-client]
#   K3_PIN_LAYERS (default 0: the spine streamed too, as K3's 107 GB spine is on a 64 GB machine)
#   the context is 4096 positions, so that eight slots' decode states fit the budget
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-2}" ram="${2:-1}" rounds="${3:-3}" new="${4:-24}" per="${5:-2}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=${DF:-./build/deltafin}
model="$dir/big-$size"
mkdir -p "$dir"
[ -f "$model/config.json" ] || $df synth --preset big --size-gb "$size" --seed 1 --out "$model" --quiet
pin="${K3_PIN_LAYERS:-0}"

serve() { # parallel: starts a server, sets $port (its log: $dir/batch-<parallel>.log)
    local log="$dir/batch-$1.log"
    rm -f "$log"
    K3_STORE=stream K3_RAM_GB="$ram" K3_PIN_LAYERS="$pin" K3_CONTEXT=4096 K3_RESPONSE_MEMO_ENTRIES=0 \
        $df serve --model "$model" --port 0 --parallel "$1" --queue 64 >/dev/null 2>"$log" &
    pids+=($!)
    for _ in $(seq 600); do grep -q "listening on" "$log" && break; sleep 0.1; done
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
serve 8
batched=$port
serve 1
single=$port
grep -h "streaming:" "$dir/batch-8.log" | head -1

/usr/bin/python3 - "$batched" "$single" "$rounds" "$new" "$per" <<'PY'
import http.client, json, statistics, sys, threading, time
batched, single, rounds, new, per = map(int, sys.argv[1:6])
counts = [1, 2, 4, 8]

def request(port, seed):
    ids = [(seed * 7919 + i * 104729) % 4000 + 10 for i in range(16)]  # distinct prompts: no prefix reuse
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps({"model": "deltafin-kimi-k3", "prompt": ids, "max_tokens": new}),
              {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    c.close()
    assert r["usage"]["completion_tokens"] == new, r
    return time.perf_counter() - t0

seed = [0]
def load(port, n):
    """n clients, `per` requests each: (aggregate tokens/s, request latencies)."""
    lat, lock = [], threading.Lock()
    def client(k):
        for i in range(per):
            with lock:
                seed[0] += 1
                s = seed[0]
            t = request(port, s)
            with lock:
                lat.append(t)
    t0 = time.perf_counter()
    th = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for t in th: t.start()
    for t in th: t.join()
    return n * per * new / (time.perf_counter() - t0), lat

request(batched, 0)  # warm up
request(single, 0)
runs = {(p, n): [] for p in ("batched", "single") for n in counts}
lats = {k: [] for k in runs}
ratio = {k: [] for k in runs}
for r in range(rounds):
    order = counts if r % 2 == 0 else counts[::-1]
    got = {}
    for n in order:
        for p, port in (("batched", batched), ("single", single)) if r % 2 == 0 else (("single", single), ("batched", batched)):
            got[p, n], l = load(port, n)
            runs[p, n].append(got[p, n])
            lats[p, n] += l
    for k in runs:
        ratio[k].append(got[k] / got[k[0], 1])
    print("round %d: " % (r + 1) + ", ".join("%s %d: %.2f tok/s" % (k[0], k[1], got[k]) for k in sorted(got)), flush=True)
print("| server | clients | aggregate tokens/s (median, range) | vs 1 client (median of per-round ratios) | request latency s (median, range) |")
print("|---|---|---|---|---|")
for p, name in (("batched", "--parallel 8"), ("single", "--parallel 1")):
    for n in counts:
        k = (p, n)
        print("| %s | %d | %.2f (%.2f-%.2f) | %.2fx | %.2f (%.2f-%.2f) |" % (name, n, statistics.median(runs[k]), min(runs[k]),
              max(runs[k]), statistics.median(ratio[k]), statistics.median(lats[k]), min(lats[k]), max(lats[k])))
PY

#!/usr/bin/env bash
# Server overhead: the same raw completion (prompt ids, greedy tokens) through `deltafin run`
# and through `deltafin serve` over HTTP, medians over several runs; time to first byte and to
# the first token of a streamed answer; the cost of a request that does no generation (models
# list, memo replay).
# usage: bench/bench_serve.sh [tiny|small] [runs] [new-tokens]
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-small}" runs="${2:-7}" new="${3:-32}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df=${DF:-./build/deltafin}
model="$dir/$which"
[ -f "$model/config.json" ] || $df synth --preset "$which" --seed 1 --out "$model" --quiet
prompt=$(seq -s ' ' 1 48)
$df run --model "$model" --tokens "1 2 3" --max-new 2 >/dev/null 2>&1 # warm the page cache

# run: prefill + decode seconds as reported by --stats (excludes loading the model)
times=() walls=()
for i in $(seq "$runs"); do
    t0=$(date +%s%N)
    s=$($df run --model "$model" --tokens "$prompt" --max-new "$new" --stats 2>&1 >/dev/null |
        sed -n 's/.*prompt [0-9]* tokens in \([0-9.]*\) s.*generated [0-9]* tokens, \([0-9.]*\) s\/token.*/\1 \2/p')
    walls+=("$(( ($(date +%s%N) - t0) / 1000 ))")
    times+=("$(awk -v n="$new" '{ printf "%.6f", $1 + $2 * (n - 1) }' <<<"$s")")
done
run_med=$(printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (runs + 1) / 2 ))p")
wall_med=$(printf '%s\n' "${walls[@]}" | sort -g | sed -n "$(( (runs + 1) / 2 ))p")
printf 'run   (whole process: load the model, prefill, decode): median %.2f ms\n' "$(awk -v u="$wall_med" 'BEGIN { print u / 1000 }')"

log="$dir/serve.$$.log"
rm -f "$log"
K3_RESPONSE_MEMO_ENTRIES=0 $df serve --model "$model" --port 0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for i in $(seq 600); do grep -q "listening on" "$log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")

/usr/bin/python3 - "$port" "$runs" "$new" "$run_med" "$prompt" "$log" <<'PY'
import http.client, json, re, statistics, sys, time
port, runs, new, run_med = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ids = [int(x) for x in sys.argv[5].split()]
log = sys.argv[6]

def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first_byte = time.perf_counter() - t0
    first_token = None
    data = b""
    if not body.get("stream"):
        data = r.read()
    while body.get("stream"):
        line = r.readline()
        data += line
        if not line or line.startswith(b"data: [DONE]"):
            break
        if first_token is None and line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["text"]:
            first_token = time.perf_counter() - t0
    total = time.perf_counter() - t0
    c.close()
    return first_byte, first_token, total, data

whole, fb, ft, rid = [], [], [], []
for i in range(runs):
    _, _, total, data = post({"model": "deltafin-kimi-k3", "prompt": ids, "max_tokens": new})
    answer = json.loads(data)
    assert answer["usage"]["completion_tokens"] == new
    whole.append(total)
    rid.append(answer["id"])
    b, t, _, _ = post({"model": "deltafin-kimi-k3", "prompt": ids, "max_tokens": new, "stream": True})
    fb.append(b)
    ft.append(t)
def ms(x): return "%.2f ms" % (x * 1e3)
def lat(method, path, body=None, n=200):
    out = []
    c = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(n):
        t0 = time.perf_counter()
        c.request(method, path, body, {"Content-Type": "application/json"})
        c.getresponse().read()
        out.append(time.perf_counter() - t0)
    c.close()
    return statistics.median(out)
time.sleep(0.2)  # the log line of the last request follows its answer
model_s = {}
for line in open(log):
    m = re.search(r" id=(\S+) .* model=([0-9.]+)s", line)
    if m:
        model_s[m.group(1)] = float(m.group(2))
over = [t - model_s[r] for t, r in zip(whole, rid)]
med = statistics.median(whole)
print("run   (prefill %d + %d tokens, model time from --stats): median %s" % (len(ids), new, ms(run_med)))
print("serve (same request, whole answer, client-side):        median %s" % ms(med))
print("serve overhead per request (client time - model time):  median %s (range %s..%s)" %
      (ms(statistics.median(over)), ms(min(over)), ms(max(over))))
print("serve stream: time to first byte median %s, to first token median %s" %
      (ms(statistics.median(fb)), ms(statistics.median(ft))))
print("serve GET /v1/models (keep-alive): median %s" % ms(lat("GET", "/v1/models")))
PY
kill -TERM $pid
wait $pid || true
tail -1 "$log"
rm -f "$log"

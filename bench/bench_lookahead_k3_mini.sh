#!/usr/bin/env bash
# Router lookahead (K3_LOOKAHEAD) on the shipped model (models/k3-mini), streamed:
#
#   bench/bench_lookahead_k3_mini.sh DATA_DIR [RUNS] [MAX_NEW] [OUT_DIR]
#
# The model is 38 MB, but the streaming store's fixed needs (decode scratch and state for a
# 2,048-position context, the runtime) are 135 MB, so budgets of 155.0, 155.8 and 158.4 MB with
# all 12 spine layers pinned leave expert caches of 37, 70 and 176 slots: 5%, 10% and 25% of the
# 704 experts. For each, lookahead off and on (K3_SPEC=0: a verify pass would route its rejected
# rows too), all six configurations interleaved in one `deltafin bench` per workload (two text
# prompts and two chat questions of bench/k3_mini_prompts.py; one warm-up round then RUNS rounds,
# default 7; MAX_NEW tokens, default 128). O_DIRECT reads, a fresh process (cold cache) per run.
# The summary gives per configuration the median decode s/token, the expert bytes read per decode
# position, the cache hit rate in decode and the lookahead's recall.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/k3_mini_bench.sh
k3_mini_init bench/bench_lookahead_k3_mini.sh 7 /tmp/deltafin-bench-lookahead-k3-mini "$@"

configs=()
for gb in 0.1550 0.1558 0.1584; do
    for la in 0 1; do
        configs+=(--config "K3_RAM_GB=$gb,K3_LOOKAHEAD=$la")
    done
done
export K3_STORE=stream K3_PIN_LAYERS=12 K3_CONTEXT=2048 K3_SPEC=0 K3_THREADS=1
k3_mini_bench text-bible-web --tokens "$(cat "$out/text-bible-web.ids")"
k3_mini_bench text-python-doc --tokens "$(cat "$out/text-python-doc.ids")"
k3_mini_bench chat-0 --chat --prompt "${questions[0]}"
k3_mini_bench chat-2 --chat --prompt "${questions[2]}"

"$py" - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/*.json")):
    j = json.load(open(path))
    for c in j["configs"]:
        r = rows.setdefault(c["name"], {"s": [], "mb": [], "hit": [], "recall": []})
        r["s"].append(c["decode_s_per_token"]["median"])
        run = c["runs"][0]
        rd, ph = run["read"], run["phases"]
        r["mb"].append(rd["decode_expert_bytes"] / ph["decode_positions"] / 1e6)
        r["hit"].append(rd["decode_cache_hits"] / max(1, rd["decode_cache_hits"] + rd["decode_cache_misses"]))
        if ph["lookahead_routed"]:
            r["recall"].append(ph["lookahead_guessed"] / ph["lookahead_routed"])
print(f"{'config':<30} {'decode s/token':>15} {'expert MB/position':>19} {'hits':>6} {'recall':>7}   (medians over workloads)")
for name, r in rows.items():
    rec = f"{100 * statistics.median(r['recall']):.1f}%" if r["recall"] else "-"
    print(f"{name:<30} {statistics.median(r['s']):>15.5f} {statistics.median(r['mb']):>19.3f} "
          f"{100 * statistics.median(r['hit']):>5.1f}% {rec:>7}")
PY

#!/usr/bin/env bash
# Lossless n-gram speculation (K3_SPEC) on the shipped model (models/k3-mini) streamed under a
# budget smaller than the model, so a verify pass reads the union of its rows' experts:
#
#   bench/bench_spec_stream_k3_mini.sh DATA_DIR [RUNS] [MAX_NEW] [OUT_DIR]
#
# Budgets as in bench/bench_lookahead_k3_mini.sh (155.0, 155.8 and 158.4 MB with all 12 spine
# layers pinned and a 2,048-position context: expert caches of 37, 70 and 176 slots, 5%, 10% and
# 25% of the 704 experts). At each, speculation off and on with router lookahead at its default
# (on), and at 10% both again with lookahead off: eight configurations interleaved in one
# `deltafin bench` per workload (the six validation texts and two chat questions of
# bench/k3_mini_prompts.py; one warm-up round then RUNS rounds, default 5; MAX_NEW new tokens,
# default 128; O_DIRECT reads; a fresh process, cold cache, per run; one compute thread).
#
# The summary gives per configuration the median over workloads of decode s/token and expert MB
# read per decode position, and per cache size the speculation's net gain (off/on s/token per
# workload: median, range, and each), the drafted tokens accepted, rows and tokens per verify
# pass, and the share of decode positions spent with drafting paused. What a verify pass costs
# against a plain one is measured apart, with fewer sources of noise: bench_verify with this
# model's routing replayed (docs/PERFORMANCE.md, Speculation under streaming).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/k3_mini_bench.sh
k3_mini_init bench/bench_spec_stream_k3_mini.sh 5 /tmp/deltafin-bench-spec-stream-k3-mini "$@"

# Speculation's replay records take 1.2 MB of the budget (48 expert slots of this model; on K3
# 0.66 GB, 37 of its 17.55 MB experts, a small share of any cache), so each speculating
# configuration gets 1.2 MB more budget: the same expert cache within two slots (39/37, 71/70,
# 177/176), as on K3.
configs=()
for pair in 0.1550:0.1562 0.1558:0.1570 0.1584:0.1596; do
    configs+=(--config "K3_RAM_GB=${pair%:*},K3_SPEC=0" --config "K3_RAM_GB=${pair#*:},K3_SPEC=1")
done
configs+=(--config "K3_RAM_GB=0.1558,K3_SPEC=0,K3_LOOKAHEAD=0" --config "K3_RAM_GB=0.1570,K3_SPEC=1,K3_LOOKAHEAD=0")
export K3_STORE=stream K3_PIN_LAYERS=12 K3_CONTEXT=2048 K3_THREADS=1
for f in "$out"/text-*.ids; do
    k3_mini_bench "$(basename "$f" .ids)" --tokens "$(cat "$f")"
done
k3_mini_bench chat-0 --chat --prompt "${questions[0]}"
k3_mini_bench chat-2 --chat --prompt "${questions[2]}"

"$py" - "$out" <<'PY'
import glob, json, os, statistics as st, sys
out = sys.argv[1]
med = st.median
rows, pairs = {}, {}
for path in sorted(glob.glob(f"{out}/*.json")):
    j = json.load(open(path))
    work = os.path.basename(path)[:-5]
    configs = j["configs"]
    for c in configs:
        r = rows.setdefault(c["name"], {"s": [], "mb": []})
        r["s"].append(c["decode_s_per_token"]["median"])
        r["mb"].append(med(x["read"]["decode_expert_bytes"] / x["phases"]["decode_positions"] / 1e6 for x in c["runs"]))
    for off, on in zip(configs[0::2], configs[1::2]):  # each speculating configuration follows its partner
        p = pairs.setdefault(off["name"].replace(",K3_SPEC=0", ""), {"gain": [], "work": [], "drafted": 0, "accepted": 0,
                                                                   "verifies": 0, "paused": 0, "passes": 0})
        p["gain"].append(off["decode_s_per_token"]["median"] / on["decode_s_per_token"]["median"])
        p["work"].append(work)
        for x in on["runs"]:
            for k in ("drafted", "accepted", "verifies", "paused", "passes"):
                p[k] += x["speculation"][k]
print(f"{'config':<44} {'decode s/token':>15} {'expert MB/position':>19}   (medians over workloads)")
for name, r in rows.items():
    print(f"{name:<44} {med(r['s']):>15.5f} {med(r['mb']):>19.3f}")
print()
print(f"{'speculation at':<30} {'off/on median':>13} {'range':>11} {'accepted':>9} {'rows/verify':>11} {'tokens/verify':>13} {'paused':>7}")
for name, p in pairs.items():
    v = max(1, p["verifies"])
    print(f"{name:<30} {med(p['gain']):>13.2f} {min(p['gain']):>5.2f}-{max(p['gain']):<5.2f} "
          f"{100 * p['accepted'] / max(1, p['drafted']):>8.1f}% {1 + p['drafted'] / v:>11.2f} {1 + p['accepted'] / v:>13.2f} "
          f"{100 * p['paused'] / p['passes']:>6.0f}%")
    print("    per workload off/on: " + ", ".join(f"{w} {g:.2f}" for w, g in zip(p["work"], p["gain"])))
PY

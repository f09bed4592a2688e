#!/usr/bin/env bash
# Lossless n-gram speculation on the shipped model (models/k3-mini) with real prompts:
#
#   bench/bench_spec_k3_mini.sh DATA_DIR [RUNS] [MAX_NEW] [OUT_DIR]
#
# Workloads (bench/k3_mini_prompts.py): the first 48 tokens of six validation documents from
# different sources (continued for MAX_NEW tokens, default 128) and six chat questions phrased as
# the validation conversations' (`--chat`, answered until <|end_of_msg|> or MAX_NEW). Each is one
# `deltafin bench` with K3_SPEC=0 and K3_SPEC=1 (one warm-up round, then RUNS interleaved rounds,
# default 9; bench fails unless both generate the same tokens), weights in RAM, one thread. The
# summary gives per workload the median decode s/token of each, their ratio, and the drafts
# verified/accepted.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/k3_mini_bench.sh
k3_mini_init bench/bench_spec_k3_mini.sh 9 /tmp/deltafin-bench-spec-k3-mini "$@"
configs=(--config K3_SPEC=0 --config K3_SPEC=1)
export K3_THREADS=1
for f in "$out"/text-*.ids; do
    n=$(basename "$f" .ids)
    k3_mini_bench "$n" --tokens "$(cat "$f")"
done
for i in "${!questions[@]}"; do
    k3_mini_bench "chat-$i" --chat --prompt "${questions[$i]}"
done

"$py" - "$out" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
print(f"{'workload':<22} {'new':>4} {'off s/tok':>10} {'on s/tok':>10} {'off/on':>7} {'verifies':>9} {'drafted':>8} {'accepted':>9} {'paused':>7}")
ratios = {"text": [], "chat": []}
for path in sorted(glob.glob(f"{out}/*.json")):
    j = json.load(open(path))
    off, on = j["configs"]
    s = on["runs"][0]["speculation"]
    new = on["runs"][0]["generated"]
    r = off["decode_s_per_token"]["median"] / on["decode_s_per_token"]["median"]
    ratios["chat" if j["chat"] else "text"].append(r)
    acc = f"{s['accepted']} ({100 * s['accepted'] / s['drafted']:.0f}%)" if s["drafted"] else "0"
    print(f"{os.path.basename(path)[:-5]:<22} {new:>4} {off['decode_s_per_token']['median']:>10.5f} "
          f"{on['decode_s_per_token']['median']:>10.5f} {r:>7.2f} {s['verifies']:>9} {s['drafted']:>8} {acc:>9} {s['paused']:>7}")
for k, v in ratios.items():
    if v:
        print(f"{k}: median off/on {statistics.median(v):.2f} over {len(v)} workloads (range {min(v):.2f}-{max(v):.2f})")
EOF

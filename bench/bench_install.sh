#!/usr/bin/env bash
# Install throughput on loopback against nginx's own file-serving ceiling, and per-expert
# on-demand fetch latency (p50/p99).
# usage: bench/bench_install.sh [size_gb] [runs]   (writes the source and installs under $BENCH_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-2}" runs="${2:-3}"
dir="${BENCH_DIR:-/tmp/deltafin-bench-install}"
export DF="$PWD/build/deltafin" PYTHON=/usr/bin/python3 DF_TEST_TMP="$dir/tmp"
mkdir -p "$DF_TEST_TMP"
source tests/cli/install_lib.sh
SRC="$dir/www/moonshotai/Kimi-K3/resolve/main"
if [ ! -f "$SRC/model.safetensors.index.json" ]; then
    mkdir -p "$SRC"
    "$DF" synth --preset big --size-gb "$size" --seed 1 --out "$SRC" --quiet >/dev/null
fi
start_nginx "$dir/www"
base="$K3_HF_HOST/moonshotai/Kimi-K3/resolve/main"
shards=$(cd "$SRC" && ls model-*.safetensors)
bytes=$(cd "$SRC" && du -bc $shards | tail -1 | cut -f1)
median() { sort -g | sed -n "$(( (runs + 1) / 2 ))p"; }
rate() { "$PYTHON" -c "print(f'{$1/$2/1e9:.2f}')"; }
echo "source: $(echo $shards | wc -w) shards, $bytes bytes, expert $(
    "$DF" inspect "$SRC" 2>/dev/null | sed -n 's/.*expert span[^0-9]*\([0-9][0-9,]*\).*/\1/p' | head -1) B"

# nginx's ceiling: the same bytes to /dev/null with curl, one file at a time and 8 at once
for par in 1 8; do
    ts=()
    for i in $(seq "$runs"); do
        t0=$(date +%s.%N)
        printf '%s\n' $shards | xargs -P "$par" -I{} curl -s -o /dev/null "$base/{}"
        ts+=("$("$PYTHON" -c "import time; print(time.time() - $t0)")")
    done
    t=$(printf '%s\n' "${ts[@]}" | median)
    echo "nginx ceiling (curl, $par parallel): $(rate "$bytes" "$t") GB/s"
done

# deltafin setup --full into a fresh root (files written and fsynced)
for par in 1 4 8; do
    ts=()
    for i in $(seq "$runs"); do
        rm -rf "$dir/root"
        t0=$(date +%s.%N)
        K3_FETCH_PARALLEL=$par "$DF" setup --full --root "$dir/root" >/dev/null 2>&1
        ts+=("$("$PYTHON" -c "import time; print(time.time() - $t0)")")
    done
    t=$(printf '%s\n' "${ts[@]}" | median)
    echo "deltafin setup --full (K3_FETCH_PARALLEL=$par): $(rate "$bytes" "$t") GB/s (median of $runs, $t s)"
done
check_install "$dir/root" --full >/dev/null && echo "last install identical to the source"

# on-demand expert fetches into a streaming install
rm -rf "$dir/stream"
"$DF" setup --stream --root "$dir/stream" >/dev/null 2>&1
build/bench/bench_expert_fetch "$dir/stream" 400 1
build/bench/bench_expert_fetch "$dir/stream" 800 16
rm -rf "$dir/root" "$dir/stream"

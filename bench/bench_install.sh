#!/usr/bin/env bash
# Install throughput on loopback against nginx's own file-serving ceiling; verification's cost
# (setup --full, which hashes every shard while it downloads, against curl writing the same bytes
# to the same disk); and per-expert on-demand fetch latency (p50/p99).
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
shards=$(cd "$SRC" && ls model-*.safetensors)
# nginx publishes each shard's SHA-256 as Hugging Face does (X-Linked-ETag), so setup verifies
publish=""
for f in $shards; do
    publish+="location = /moonshotai/Kimi-K3/resolve/main/$f { add_header X-Linked-ETag '\"$(sha256sum "$SRC/$f" | cut -c1-64)\"'; } "
done
start_nginx "$dir/www" "$publish"
base="$K3_HF_HOST/moonshotai/Kimi-K3/resolve/main"
bytes=$(cd "$SRC" && du -bc $shards | tail -1 | cut -f1)
median() { sort -g | sed -n "$(( (runs + 1) / 2 ))p"; }
rate() { "$PYTHON" -c "print(f'{$1/$2/1e9:.2f}')"; }
echo "source: $(echo $shards | wc -w) shard(s), $bytes bytes"

# ceilings: nginx serving the same bytes to curl (/dev/null), whole files one at a time and as
# 64 MiB ranges 8 at once (the installer's pattern); the disk writing them (dd, fdatasync)
ranges() { for f in $shards; do s=$(stat -c %s "$SRC/$f"); for ((o = 0; o < s; o += 64 << 20)); do
    e=$((o + (64 << 20) - 1)); [ $e -ge $s ] && e=$((s - 1)); echo "$f $o-$e"; done; done; }
for par in 1 8; do
    ts=()
    for i in $(seq "$runs"); do
        t0=$(date +%s.%N)
        if [ "$par" = 1 ]; then printf '%s\n' $shards | xargs -I{} curl -s -o /dev/null "$base/{}"
        else ranges | xargs -P 8 -n 2 sh -c 'curl -s -o /dev/null -r "$1" "'"$base"'/$0"'; fi
        ts+=("$("$PYTHON" -c "import time; print(time.time() - $t0)")")
    done
    t=$(printf '%s\n' "${ts[@]}" | median)
    echo "nginx ceiling (curl, $par parallel): $(rate "$bytes" "$t") GB/s"
done
t0=$(date +%s.%N)
dd if=/dev/zero of="$dir/dd.tmp" bs=4M count=$((bytes >> 22)) conv=fdatasync 2>/dev/null
echo "disk ceiling (dd, fdatasync): $(rate "$bytes" "$("$PYTHON" -c "import time; print(time.time() - $t0)")") GB/s"
rm -f "$dir/dd.tmp"

# verification costs no extra pass: setup --full (every shard's SHA-256 computed while it
# downloads and compared with the published one, every range fdatasynced before it is
# recorded) against curl writing the same bytes
# to the same disk, 8 ranges at once (dd at each range's offset) and then synced. Interleaved
# runs; "tail" is what setup spends after its download reached 100% (hash remainder, commit).
now() { "$PYTHON" -c "import time; print(time.time())"; }
curl_ranges() { # dest dir
    for f in $shards; do truncate -s "$(stat -c %s "$SRC/$f")" "$1/$f"; done
    ranges | xargs -P 8 -n 2 sh -c 'a=${1%-*}; curl -s -r "$1" "'"$base"'/$0" | dd of="'"$1"'/$0" bs=1M seek="$a" \
        oflag=seek_bytes conv=notrunc status=none'
    sync -f "$1"
}
tc=() td=() tail=() tv=()
for i in $(seq "$runs"); do
    rm -rf "$dir/curl" "$dir/root"; mkdir -p "$dir/curl"
    t0=$(now); curl_ranges "$dir/curl"; tc+=("$("$PYTHON" -c "print($(now) - $t0)")")
    t0=$(now); K3_FETCH_PARALLEL=8 "$DF" setup --full --root "$dir/root" >"$dir/setup.out" 2>&1; t1=$(now)
    td+=("$("$PYTHON" -c "print($t1 - $t0)")")
    dl=$(sed -n 's/.*setup (full): .* took \([0-9.]*\) s.*/\1/p' "$dir/setup.out" | tail -1)
    tail+=("$("$PYTHON" -c "print($t1 - $t0 - ${dl:-0})")")
    grep -q "$(echo $shards | wc -w) file(s) match the hash the source published" "$dir/setup.out" \
        || { cat "$dir/setup.out"; echo "setup did not verify the shards against their published SHA-256"; exit 1; }
    # what a separate pass would cost: every shard read back and hashed (doctor --verify)
    t0=$(now); "$DF" doctor --verify --root "$dir/root" >/dev/null 2>&1 || { echo "doctor --verify failed"; exit 1; }
    tv+=("$("$PYTHON" -c "print($(now) - $t0)")")
done
for f in $shards; do cmp -s "$dir/curl/$f" "$SRC/$f" || { echo "curl's copy of $f differs"; exit 1; }; done
c=$(printf '%s\n' "${tc[@]}" | median) d=$(printf '%s\n' "${td[@]}" | median) t=$(printf '%s\n' "${tail[@]}" | median)
v=$(printf '%s\n' "${tv[@]}" | median)
echo "curl, 8 ranges at once, to the disk: $(rate "$bytes" "$c") GB/s ($c s); setup --full with SHA-256: $(rate "$bytes" "$d") GB/s ($d s); ratio $("$PYTHON" -c "print(f'{$d/$c:.2f}')"); after 100%: $t s; a separate hashing pass (doctor --verify): $v s (medians of $runs, interleaved)"
rm -rf "$dir/curl"

# deltafin setup --full into a fresh root (files written and fsynced), on the disk and, to take
# the disk out of the measurement, in tmpfs (/dev/shm)
install_root() { # root parallel
    ts=()
    for i in $(seq "$runs"); do
        rm -rf "$1"
        t0=$(date +%s.%N)
        K3_FETCH_PARALLEL=$2 "$DF" setup --full --root "$1" >/dev/null 2>&1
        ts+=("$("$PYTHON" -c "import time; print(time.time() - $t0)")")
    done
    t=$(printf '%s\n' "${ts[@]}" | median)
    echo "deltafin setup --full into $1 (K3_FETCH_PARALLEL=$2): $(rate "$bytes" "$t") GB/s (median of $runs, $t s)"
}
shm=""
[ -d /dev/shm ] && [ "$(df -k --output=avail /dev/shm | tail -1)" -gt $((bytes / 1024 * 2)) ] && shm=/dev/shm/deltafin-bench-root
for par in 1 4 8; do
    install_root "$dir/root" "$par"
    [ -n "$shm" ] && install_root "$shm" "$par"
done
[ -n "$shm" ] && rm -rf "$shm"
check_install "$dir/root" --full >/dev/null && echo "last install identical to the source"

# on-demand expert fetches into a streaming install
rm -rf "$dir/stream"
"$DF" setup --stream --root "$dir/stream" >/dev/null 2>&1
build/bench/bench_expert_fetch "$dir/stream" 400 1
build/bench/bench_expert_fetch "$dir/stream" 800 16
rm -rf "$dir/root" "$dir/stream"

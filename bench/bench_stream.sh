#!/usr/bin/env bash
# Streaming decode of a synth model larger than RAM, inside a memory limit below the model's size.
#
#   bench/bench_stream.sh [model_gb] [limit_gb] [tokens]      (defaults: 40 12 40)
#
# Writes a `synth --preset big` model under $BENCH_DIR (default /tmp/deltafin-bench; removed at
# the end unless KEEP=1), measures the I/O floor on the same file system (O_DIRECT random reads of
# one expert span, fio, as many parallel readers as the store's I/O threads; without fio, one dd
# reading a shard sequentially with O_DIRECT: `scripts/install-deps.sh bench` installs fio), then
# runs inside the memory limit (systemd-run, else a cgroup v2 or v1 directory,
# else prlimit as a last resort):
#   1. the streaming store, automatic budget: per-token time, bytes read; cold = the first decode
#      tokens of a fresh process (empty expert cache), warm = the last ones (cache filled);
#   2. the mapped store (plain mmap, page faults), page cache emptied first (cold), then again (warm).
# Prints medians, the floor (bytes per token / O_DIRECT bandwidth), ratios, peak RSS and OOM status.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-40}" limit="${2:-12}" new="${3:-40}"
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df="$PWD/build/deltafin"
model="$dir/big$size"
io_threads="${K3_IO_THREADS:-16}"
export K3_IO_THREADS="$io_threads"
mkdir -p "$dir"
log="$dir/bench_stream.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

[ -f "$model/config.json" ] || { say "writing $size GB model..."; "$df" synth --preset big --size-gb "$size" --seed 1 --out "$model" --quiet; }
model_gb=$(du -s --block-size=1 "$model" | awk '{printf "%.1f", $1 / 1e9}')
ram_gb=$(awk '/MemTotal/ {printf "%.1f", $2 * 1024 / 1e9}' /proc/meminfo)
swap_kb=$(awk '/SwapTotal/ {print $2}' /proc/meminfo)
expert=$("$df" inspect "$model" | sed -n 's/^per expert *\([0-9]*\) bytes.*/\1/p')
say "model $model: $model_gb GB on a machine with $ram_gb GB RAM (swap ${swap_kb} kB); limit $limit GiB; expert span $expert B"

# ---- I/O floor ----
shards=$(ls "$model"/model-*.safetensors | tr '\n' ':' | sed 's/:$//')
if command -v fio >/dev/null; then
    bs=$(( (expert + 4095) / 4096 * 4096 ))
    bw=$(fio --name=floor --filename="$shards" --rw=randread --bs="$bs" --direct=1 --ioengine=psync --numjobs="$io_threads" \
        --group_reporting --runtime=10 --time_based --output-format=terse 2>/dev/null | awk -F';' '{print $7 * 1024}')
    how="fio randread bs=$bs O_DIRECT x$io_threads"
else
    first=$(ls "$model"/model-*.safetensors | head -1)
    # dd's summary: "BYTES bytes (...) copied, SECONDS s, RATE": the bandwidth is BYTES / SECONDS
    bw=$(LC_ALL=C dd if="$first" of=/dev/null bs=64M count=64 iflag=direct 2>&1 |
        awk '/copied/ { for (i = 1; i < NF; i++) if ($(i + 1) == "s,") s = $i; if (s > 0) printf "%.0f\n", $1 / s }')
    how="dd sequential O_DIRECT, one reader: fio is missing (scripts/install-deps.sh bench)"
fi
awk -v b="${bw:-0}" 'BEGIN { exit !(b > 0) }' || { say "the I/O floor could not be measured ($how)"; exit 1; }
say "I/O floor bandwidth: $(awk -v b="$bw" 'BEGIN {printf "%.3f", b / 1e9}') GB/s ($how)"

# ---- the memory limit ----
cg=""
limit_bytes=$((limit * 1024 * 1024 * 1024))
cleanup() { [ -n "$cg" ] && rmdir "$cg" 2>/dev/null; [ "${KEEP:-0}" = 1 ] || rm -rf "$model"; }
trap cleanup EXIT
if systemd-run --scope -q -p MemoryMax=1G true 2>/dev/null; then
    limited() { systemd-run --scope -q -p MemoryMax="$limit_bytes" -p MemorySwapMax=0 "$@"; }
    say "limit: systemd-run --scope -p MemoryMax=${limit}G"
elif [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg=/sys/fs/cgroup/deltafin-bench-$$; mkdir "$cg"; echo "$limit_bytes" >"$cg/memory.max"; echo 0 >"$cg/memory.swap.max" || true
    limited() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
    say "limit: cgroup v2 $cg memory.max=$limit_bytes"
elif [ -d /sys/fs/cgroup/memory ] && mkdir /sys/fs/cgroup/memory/deltafin-bench-$$ 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/deltafin-bench-$$; echo "$limit_bytes" >"$cg/memory.limit_in_bytes"
    limited() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
    say "limit: cgroup v1 $cg memory.limit_in_bytes=$limit_bytes"
else
    limited() { prlimit --as="$limit_bytes" "$@"; }
    say "limit: prlimit --as (address space, last resort)"
fi

prompt="1 2 3 4 5 6 7 8"
median() { sort -g | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2); else print "nan"}'; }
# profile lines of single-position forwards: "seconds MB-read"
decode_rows() { sed -n 's/^profile: pos [0-9]* +1: \([0-9.]*\) s | read spine \([0-9.]*\) MB, experts \([0-9.]*\) MB.*/\1 \2 \3/p' "$1" | awk '{print $1, $2 + $3}'; }
drop_cache() { "${PYTHON:-/usr/bin/python3}" -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$model"/*.safetensors; }

run() { # label store tokens -> $dir/$label.err
    local label="$1" store="$2" n="$3" rc=0
    limited env K3_STORE="$store" K3_PROFILE=1 /usr/bin/time -v "$df" run --model "$model" --tokens "$prompt" --max-new "$n" --stats \
        >"$dir/$label.out" 2>"$dir/$label.err" || rc=$?
    local rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/$label.err")
    say "$label: exit $rc, peak RSS $(awk -v k="$rss" 'BEGIN {printf "%.2f", k * 1024 / 1e9}') GB, tokens $(wc -w <"$dir/$label.out")"
    grep -E "^deltafin: streaming|^stats:" "$dir/$label.err" | tee -a "$log" || true
    [ -n "$cg" ] && [ -f "$cg/memory.oom_control" ] && say "  cgroup: $(tr '\n' ' ' <"$cg/memory.oom_control") max usage $(cat "$cg/memory.max_usage_in_bytes")"
    [ -n "$cg" ] && [ -f "$cg/memory.events" ] && say "  cgroup: $(tr '\n' ' ' <"$cg/memory.events")"
    return 0
}

report() { # label rows-file first last
    local rows="$1" from="$2" to="$3" label="$4"
    local sel=$(sed -n "${from},${to}p" "$rows")
    local t=$(echo "$sel" | awk '{print $1}' | median) mb=$(echo "$sel" | awk '{print $2}' | median)
    local floor=$(awk -v mb="$mb" -v b="$bw" 'BEGIN {printf "%.3f", mb * 1e6 / b}')
    say "$(printf '%-14s decode median %.3f s/token | read %.1f MB/token | floor %s s/token | ratio %.2fx' \
        "$label" "$t" "$mb" "$floor" "$(awk -v t="$t" -v f="$floor" 'BEGIN {print (f > 0 ? t / f : 0)}')")"
}

run stream stream "$new"
decode_rows "$dir/stream.err" | tail -n +2 >"$dir/stream.rows"   # the first decode token follows prefill
n=$(wc -l <"$dir/stream.rows")
report "$dir/stream.rows" 1 8 "stream cold"
report "$dir/stream.rows" $((n - 7)) "$n" "stream warm"
stream_mb=$(awk '{print $2}' "$dir/stream.rows" | sed -n '1,8p' | median)

drop_cache
run mmap-cold mapped 9
run mmap-warm mapped 9
for w in cold warm; do
    decode_rows "$dir/mmap-$w.err" | tail -n +2 | awk -v mb="$stream_mb" '{print $1, mb}' >"$dir/mmap-$w.rows"
    report "$dir/mmap-$w.rows" 1 8 "mmap $w"
done
say "(mmap rows use the streaming run's cold bytes per token for the floor: page faults are not counted)"

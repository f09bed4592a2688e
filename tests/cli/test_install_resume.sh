#!/usr/bin/env bash
# Interrupted installs keep what they received. nginx on loopback serves the shards at 100 kB/s a
# connection (limit_rate): every range in flight (one per shard, far below the 64 MB a range may
# be) takes longer than a run lasts. Three runs of `setup --full` killed with SIGKILL 6 s into
# their downloads each record more bytes (the prefixes of the ranges in flight), every recorded
# byte equals the source's, the progress line says how much is saved, and a last run at full
# speed fetches only what is still missing and ends with files identical to the source.
source "$(dirname "$0")/install_lib.sh"
set -o pipefail
T="$DF_TEST_TMP/inst_resume"; rm -rf "$T"; mkdir -p "$T"
make_source "$T"
# slow while $T/slow exists
start_nginx "$T/www" "location ~ \\.safetensors\$ { if (-f $T/slow) { set \$limit_rate 100k; } }"
LOG="$DF_TEST_TMP/nginx/access.log"
shard_bytes() { awk -v from="$1" 'NR > from && $7 ~ /safetensors/ && $9 == 206 {s += $10} END {print s + 0}' "$LOG"; }
present() { local out; out=$(check_install "$R") || fail "$1: $out"; out=${out#present=}; echo "${out%% *}"; }
R="$T/root"
touch "$T/slow"
prev=0
manifest_sum() { cksum "$R/deltafin-manifest.txt" 2>/dev/null || echo none; }
for i in 1 2 3; do
    before=$(manifest_sum)
    "$DF" setup --full --root "$R" >"$T/run.$i" 2>&1 &
    pid=$!
    # the run's clock starts when it has written the metadata and headers (however loaded the machine)
    for _ in $(seq 1200); do
        [ "$(manifest_sum)" != "$before" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    sleep 6
    kill -9 "$pid" 2>/dev/null || fail "run $i ended before it was killed: $(cat "$T/run.$i")"
    wait "$pid" 2>/dev/null || true
    now=$(present "after kill $i")
    echo "kill $i: $now bytes recorded"
    [ "$i" -eq 1 ] || [ "$now" -gt "$prev" ] || { cat "$T/run.$i"; fail "run $i kept nothing of what it received ($prev -> $now bytes)"; }
    [ "$i" -eq 1 ] && first=$now
    prev=$now
done
[ $((prev - first)) -gt 1000000 ] || fail "runs 2 and 3 kept only $((prev - first)) bytes"
grep -q "^setup (full): .* ([0-9.]*%), [0-9.]* [kM]B saved, " "$T"/run.* || { cat "$T"/run.*; fail "no progress line says what is saved"; }

rm "$T/slow"
mark=$(wc -l <"$LOG")
"$DF" setup --full --root "$R" >"$T/final" 2>&1 || { cat "$T/final"; fail "the last run"; }
check_install "$R" --full || fail "the finished install differs from the source"
total=$(du -bc "$SRC"/*.safetensors | tail -1 | cut -f1)
fetched=$(shard_bytes "$mark")
echo "last run: $fetched bytes fetched, $((prev - first)) kept from the killed runs, shards $total bytes"
[ "$fetched" -le $((total - (prev - first))) ] || fail "the last run fetched again what the killed runs had kept"
echo ok

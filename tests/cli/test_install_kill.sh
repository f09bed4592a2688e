#!/usr/bin/env bash
# kill -9 at random moments of a full install, several times: after every kill the manifest
# records only bytes equal to the source, each rerun resumes (fetches less than everything
# again), and the last run finishes with files identical to the source.
source "$(dirname "$0")/install_lib.sh"
T="$DF_TEST_TMP/inst_kill"; rm -rf "$T"; mkdir -p "$T"
make_source "$T"
export K3_FETCH_CHUNK_KB=32 K3_FETCH_PARALLEL=3 K3_FETCH_RETRIES=2
start_faults "$SRC" --delay-ms 25
R="$T/root"
seed=${KILL_SEED:-$RANDOM}
echo "kill seed $seed"
RANDOM=$seed
prev=0 grew=0
manifest_sum() { cksum "$R/deltafin-manifest.txt" 2>/dev/null || echo none; }
for i in 1 2 3 4 5 6; do
    before=$(manifest_sum)
    "$DF" setup --full --root "$R" >"$T/run.$i" 2>&1 &
    pid=$!
    # the kill lands at a random moment after this run first records something (on a loaded
    # machine getting there can take seconds, and a kill before it tests nothing)
    for _ in $(seq 400); do
        [ "$(manifest_sum)" != "$before" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ -f "$R/deltafin-manifest.txt" ] || continue
    out=$(check_install "$R") || fail "after kill $i: $out"
    now=${out#present=}; now=${now%% *}
    [ "$now" -ge "$prev" ] || fail "after kill $i: present bytes went down ($prev -> $now)"
    echo "kill $i: $out"
    [ "$now" -gt "$prev" ] && grew=$((grew + 1))
    prev=$now
done
[ "$grew" -ge 3 ] || fail "only $grew of 6 killed runs kept any progress"
"$DF" setup --full --root "$R" >"$T/final" 2>&1 || { cat "$T/final"; fail "final run"; }
check_install "$R" --full || fail "final install differs from the source"
# resumed: the requests after the kills did not fetch every byte again
fetched=$(awk '$1=="GET" && $3!="-" && $4 ~ /^206/ {split($3,a,"[=-]"); s+=a[3]-a[2]+1} END {print s+0}' "$FLOG")
total=$(du -bc "$SRC"/*.safetensors | tail -1 | cut -f1)
echo "bytes fetched over all runs: $fetched (source shards: $total)"
[ "$fetched" -lt $((total * 3 / 2)) ] || fail "resuming re-fetched too much"
echo ok

#!/usr/bin/env bash
# The streaming store on recorded real routing at K3's scale: decode s/token against the I/O floors.
#
#   bench/bench_replay.sh TRACE [model_gb] [budget_gb] [tokens] [rounds] [LABEL=SETTINGS ...]
#       defaults: 32 GB (a `synth --preset big` of 93 layers: K3's 92 MoE layers x 896 experts,
#       top-16), budget 3 GB, 40 new tokens, 3 rounds, one configuration "default=" (no settings).
#       A configuration is a label and comma-separated K3_* settings, e.g. uring=K3_IO=uring.
#
# Every run is a fresh process (cold expert cache) of `deltafin run` with K3_REPLAY=TRACE (the
# router's choices replaced by the trace's, mapped onto the model by src/store/route_trace.h's
# rule: the output is meaningless), K3_STORE=stream, K3_RAM_GB=budget, K3_CONTEXT=4096, K3_SPEC=0,
# inside a memory limit of budget + 1 GiB (cgroup; peak RSS and OOM kills reported). Runs of the
# configurations alternate, round after round. Before every round, on the same files: the O_DIRECT
# bandwidth of random expert-span reads (fio, 16 jobs, 5 s); the floors use the median.
#   cold        the first 8 decode tokens (the cache holds only what the 8-token prompt read);
#               floor = the bytes they read / bandwidth
#   warm        the last 8 decode tokens
#   no-reuse floor   all selected experts' bytes per token / bandwidth (what a store without a
#               cache would read)
#   policy floor     the bytes of the misses the default policy predicts for this cache size on
#               this trace (bench_stream_policy --predict) / bandwidth
# The model is written under $BENCH_DIR (default /tmp/deltafin-bench) and removed at the end
# unless KEEP=1. Needs root for the cgroup (else prlimit on the address space).
set -euo pipefail
cd "$(dirname "$0")/.."
trace="${1:?usage: bench/bench_replay.sh TRACE [model_gb] [budget_gb] [tokens] [rounds] [LABEL=SETTINGS ...]}"
size="${2:-32}" budget="${3:-3}" new="${4:-40}" rounds="${5:-3}"
shift $(($# < 5 ? $# : 5))
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=("default=")
dir="${BENCH_DIR:-/tmp/deltafin-bench}"
df="$PWD/build/deltafin" policy="$PWD/build/bench/bench_stream_policy" PYTHON_BIN="${PYTHON:-/usr/bin/python3}"
model="$dir/big$size"
mkdir -p "$dir"
log="$dir/bench_replay.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
cleanup() { [ -n "${cg:-}" ] && rmdir "$cg" 2>/dev/null; [ "${KEEP:-0}" = 1 ] || rm -rf "$model"; }
trap cleanup EXIT

[ -f "$model/config.json" ] || { say "writing $size GB model..."; nice "$df" synth --preset big --size-gb "$size" --seed 1 --out "$model" --quiet; }
model_gb=$(du -s --block-size=1 "$model" | awk '{printf "%.1f", $1 / 1e9}')
layers=$(sed -n 's/.*"num_hidden_layers": *\([0-9]*\).*/\1/p' "$model/config.json")
dense=$(sed -n 's/.*"first_k_dense_replace": *\([0-9]*\).*/\1/p' "$model/config.json")
experts=$(sed -n 's/.*"num_experts": *\([0-9]*\).*/\1/p' "$model/config.json")
top_k=$(sed -n 's/.*"num_experts_per_token": *\([0-9]*\).*/\1/p' "$model/config.json")
moe=$((layers - dense))
span=$("$df" inspect "$model" | sed -n 's/^per expert *\([0-9]*\) bytes.*/\1/p')
slot=$(( (span + 4095) / 4096 * 4096 + 4096 ))   # an unaligned span's read covers one more block at most
say "model $model: $model_gb GB, $moe MoE layers x $experts experts, top-$top_k, expert span $span B; budget $budget GB ($(awk -v m="$model_gb" -v b="$budget" 'BEGIN {printf "%.1f", m / b}')x smaller than the model)"
say "trace $trace ($(wc -l <"$trace") positions), mapped onto the model: the output is meaningless"

# ---- bandwidth: measured before every round (the disk is shared), the median is the floors' ----
shards=$(ls "$model"/model-*.safetensors | tr '\n' ':' | sed 's/:$//')
bs=$(( (span + 4095) / 4096 * 4096 ))
measure_bw() {
    fio --name=floor --filename="$shards" --rw=randread --bs="$bs" --direct=1 --ioengine=psync --numjobs=16 \
        --group_reporting --runtime=5 --time_based --output-format=terse 2>/dev/null | awk -F';' '{print $7 * 1024}' >>"$dir/bw"
}
: >"$dir/bw"

# ---- the memory limit ----
cg=""
limit_bytes=$(awk -v b="$budget" 'BEGIN {printf "%.0f", (b + 1.0737) * 1e9}')
if [ -d /sys/fs/cgroup/memory ] && mkdir /sys/fs/cgroup/memory/deltafin-replay-$$ 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/deltafin-replay-$$; echo "$limit_bytes" >"$cg/memory.limit_in_bytes"
    limited() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
elif [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then
    cg=/sys/fs/cgroup/deltafin-replay-$$; mkdir "$cg"; echo "$limit_bytes" >"$cg/memory.max"
    limited() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
else
    limited() { "$@"; }
fi
say "limit: ${cg:-none} ($limit_bytes bytes)"

median() { sort -g | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2); else print "nan"}'; }
range() { sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.3f..%.3f", lo, hi}'; }
# decode profile lines: "seconds MB-read hits needs"
rows() { sed -n 's/^profile: pos [0-9]* +1: \([0-9.]*\) s | read spine \([0-9.]*\) MB, experts \([0-9.]*\) MB.*cache hits \([0-9]*\)\/\([0-9]*\).*/\1 \2 \3 \4 \5/p' "$1" |
    awk '{print $1, $2 + $3, $4, $5}'; }

run_one() { # label settings round
    local label="$1" settings="$2" r="$3" out="$dir/replay-$1-$3"
    local envs=(K3_REPLAY="$trace" K3_STORE=stream K3_RAM_GB="$budget" K3_CONTEXT=4096 K3_SPEC=0 K3_PROFILE=1)
    [ -n "$settings" ] && IFS=, read -r -a extra <<<"$settings" && envs+=("${extra[@]}")
    limited env "${envs[@]}" /usr/bin/time -v "$df" run --model "$model" --tokens "1 2 3 4 5 6 7 8" --max-new "$new" --stats \
        >"$out.out" 2>"$out.err" || { tail -5 "$out.err"; say "$label round $r failed"; return 1; }
    rows "$out.err" | tail -n +2 >"$out.rows" # the first decode token comes with the prefill
    sed -n 's/.*Maximum resident set size (kbytes): //p' "$out.err" >"$out.rss"
    [ -n "$cg" ] && [ -f "$cg/memory.oom_control" ] && grep -h oom_kill "$cg/memory.oom_control" | awk '{print $2}' >"$out.oom"
    return 0
}

for r in $(seq "$rounds"); do
    measure_bw
    for c in "${configs[@]}"; do run_one "${c%%=*}" "${c#*=}" "$r"; done
done
bw=$(median <"$dir/bw")
say "O_DIRECT bandwidth: $(awk -v b="$bw" 'BEGIN {printf "%.3f", b / 1e9}') GB/s, median of $rounds (range $(awk '{print $1 / 1e9}' "$dir/bw" | range)) (fio randread bs=$bs x16, 5 s before each round)"

first="${configs[0]%%=*}"
plan=$(grep -h "^deltafin: streaming" "$dir/replay-$first-1.err")
say "$plan"
slots=$(echo "$plan" | sed -n 's/.*expert cache [0-9.]* GB = \([0-9]*\) x.*/\1/p')
"$policy" --predict "$moe,$experts,$top_k,$slots,8,$new" "$trace" >"$dir/predict.json"
n_rows=$(wc -l <"$dir/replay-$first-1.rows")
per_token=$((moe * top_k))
pred=$("$PYTHON_BIN" - "$dir/predict.json" "$n_rows" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); n = int(sys.argv[2])
h, need = p["hits"][2:2 + n], p["needs"][2:2 + n]      # pass 0 is the prompt, pass 1 the first decode token
w = slice(max(0, n - 8), n)
print(sum(need[w]) - sum(h[w]), len(need[w]), 100.0 * sum(h[w]) / max(1, sum(need[w])))
PY
)
read -r warm_miss warm_n warm_pred_hit <<<"$pred"
noreuse=$(awk -v k="$per_token" -v s="$slot" -v b="$bw" 'BEGIN {printf "%.3f", k * s / b}')
polfloor=$(awk -v m="$warm_miss" -v n="$warm_n" -v s="$slot" -v b="$bw" 'BEGIN {printf "%.3f", m / n * s / b}')
say "no-reuse floor: $per_token experts x $slot B / bandwidth = $noreuse s/token; policy floor (warm tokens): $polfloor s/token ($(printf '%.1f' "$warm_pred_hit")% hits predicted)"
for c in "${configs[@]}"; do
    label="${c%%=*}"
    cold_t=() cold_f=() warm_t=() warm_h=() rss=()
    for r in $(seq "$rounds"); do
        f="$dir/replay-$label-$r.rows"
        cold_t+=("$(sed -n '1,8p' "$f" | awk '{print $1}' | median)")
        cold_f+=("$(sed -n '1,8p' "$f" | awk -v b="$bw" '{print $2 * 1e6 / b}' | median)")
        warm_t+=("$(tail -8 "$f" | awk '{print $1}' | median)")
        warm_h+=("$(tail -8 "$f" | awk '{h += $3; n += $4} END {printf "%.1f", 100 * h / n}')")
        rss+=("$(awk '{printf "%.2f", $1 * 1024 / 1e9}' "$dir/replay-$label-$r.rss")")
    done
    ct=$(printf '%s\n' "${cold_t[@]}" | median) cf=$(printf '%s\n' "${cold_f[@]}" | median)
    wt=$(printf '%s\n' "${warm_t[@]}" | median)
    say "$(printf '%-10s cold %.3f s/token (%s) vs its floor %.3f: %.2fx | warm %.3f s/token (%s), hits %s%% | warm / no-reuse floor %.2fx, / policy floor %.2fx | peak RSS %s GB' \
        "$label" "$ct" "$(printf '%s\n' "${cold_t[@]}" | range)" "$cf" "$(awk -v a="$ct" -v b="$cf" 'BEGIN {print a / b}')" \
        "$wt" "$(printf '%s\n' "${warm_t[@]}" | range)" "$(IFS=/; echo "${warm_h[*]}")" \
        "$(awk -v a="$wt" -v b="$noreuse" 'BEGIN {print a / b}')" "$(awk -v a="$wt" -v b="$polfloor" 'BEGIN {print a / b}')" \
        "$(IFS=/; echo "${rss[*]}")")"
done

# k3_mini_bench.sh - sourced by the benchmarks of the shipped model (bench/bench_*_k3_mini.sh):
# their common arguments, the workloads' prompts, and one `deltafin bench` per workload.
#
#   k3_mini_init SCRIPT DEFAULT_RUNS DEFAULT_OUT DATA_DIR [RUNS] [MAX_NEW] [OUT_DIR]
#       sets data, runs, max_new (default 128), out, df, py; writes the prompts of
#       bench/k3_mini_prompts.py into out (text-*.ids) and reads its chat questions into `questions`
#   k3_mini_bench NAME PROMPT_OPTIONS...
#       one `deltafin bench` of models/k3-mini over the caller's array `configs` (one warm-up
#       round, then `runs` interleaved rounds): out/NAME.json and out/NAME.txt; exits on failure
k3_mini_init() {
    local script=$1 default_runs=$2 default_out=$3
    shift 3
    data=${1:?usage: $script DATA_DIR [RUNS] [MAX_NEW] [OUT_DIR]}
    runs=${2:-$default_runs}
    max_new=${3:-128}
    out=${4:-$default_out}
    df=${DF:-build/deltafin}
    py=${PYTHON:-/usr/bin/python3}
    mkdir -p "$out"
    rm -f "$out"/*.json
    "$py" bench/k3_mini_prompts.py "$data" "$out"
    mapfile -t questions <"$out/questions.txt"
}

k3_mini_bench() {
    local name=$1
    shift
    echo "== $name" >&2
    nice -n 5 "$df" bench --model models/k3-mini "$@" --max-new "$max_new" --runs "$runs" --warmup "${configs[@]}" \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1 || { cat "$out/$name.txt" >&2; exit 1; }
}

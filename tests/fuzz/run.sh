#!/usr/bin/env bash
# Runs the libFuzzer harnesses of build-fuzz/fuzz/ (make fuzz) over their seed corpora.
#
#   tests/fuzz/run.sh [SECONDS] [NAME...]      each harness for SECONDS (default 5): the short run
#                                             of `make test`; seeds and regression inputs included
#   tests/fuzz/run.sh --long RUNS [NAME...]   each harness for RUNS executions (e.g. 10000000),
#                                             growing a working corpus in $FUZZ_WORK/NAME (default
#                                             /tmp/deltafin-fuzz) that later runs continue from
#
# Crashes, leaks, timeouts and sanitizer reports fail the run; the input is saved next to the
# working corpus and its path printed (add it to tests/fuzz/corpus/NAME/ once fixed). One summary
# line per harness: executions, exec/s, coverage (edges) and features. Run long runs niced.
# FUZZ_BIN selects another directory of harness binaries (default build-fuzz/fuzz). A harness may
# have tests/fuzz/fuzz_NAME.options: libFuzzer flags of its own (one line, e.g. a smaller -max_len
# where long inputs only cost time).
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=short seconds=5 runs=0
if [ "${1:-}" = --long ]; then mode=long runs="${2:?--long needs a number of executions}"; shift 2
elif [ -n "${1:-}" ] && [ "${1#[0-9]}" != "$1" ]; then seconds="$1"; shift; fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi
work="${FUZZ_WORK:-/tmp/deltafin-fuzz}"
[ "$mode" = short ] && work="$(mktemp -d /tmp/deltafin-fuzz-short.XXXXXX)"
failed=0
for name in "${names[@]}"; do
    bin="${FUZZ_BIN:-build-fuzz/fuzz}/fuzz_$name" seeds="tests/fuzz/corpus/$name"
    [ -x "$bin" ] || { echo "fuzz_$name: $bin missing (run make fuzz)"; failed=1; continue; }
    mkdir -p "$work/$name" "$work/$name.crashes"
    limit=(-max_total_time="$seconds")
    [ "$mode" = long ] && limit=(-runs="$runs")
    log="$work/$name.log"
    extra=()
    [ -f "tests/fuzz/fuzz_$name.options" ] && read -r -a extra <"tests/fuzz/fuzz_$name.options"
    "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 "${extra[@]}" -print_final_stats=1 \
        -artifact_prefix="$work/$name.crashes/" "$work/$name" "$seeds" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        failed=1
        echo "FAIL fuzz_$name: exit $rc after ${execs:-?} executions; input: $(ls "$work/$name.crashes/" | head -1)"
        grep -m 12 -E "ERROR|FUZZ_ASSERT|runtime error|SUMMARY|#[0-9] " "$log" | sed 's/^/     | /'
        echo "     | log: $log"
    else
        echo "fuzz_$name: ${execs:-0} executions, ${rate:-0} exec/s, ${cov:-no coverage line}, 0 crashes"
    fi
done
[ "$mode" = short ] && [ $failed -eq 0 ] && rm -rf "$work"
exit $failed

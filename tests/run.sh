#!/usr/bin/env bash
# Runs every test: unit tests (release and ASan+UBSan builds), command-line tests, the NumPy
# reference comparisons, the trainer's tests (PyTorch on the CPU), the Node.js peer tests and a
# short run of every fuzzing harness (when `make fuzz` built them), and the AArch64 build under qemu
# (when `make aarch64` built it). Prints each group's time, then one "N passed, N failed" line last.
# A test group can be selected: tests/run.sh unit|cli|train|node|fuzz|arm
set -uo pipefail
cd "$(dirname "$0")/.."
export DF="$PWD/build/deltafin" DF_ASAN="$PWD/build-asan/deltafin"
export PYTHON="${PYTHON:-/usr/bin/python3}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export DF_TEST_TMP="${DF_TEST_TMP:-$(mktemp -d /tmp/deltafin-test.XXXXXX)}"
# servers keep no prompt cache (it would outlive the run in ~/.cache and carry prompts from one test
# to the next) unless a test names one: tests/node/test_prompt_cache.mjs
export DELTAFIN_PROMPT_CACHE=off
mkdir -p "$DF_TEST_TMP"
only="${1:-all}"
pass=0; fail=0; failed=(); times=()

run_one() { # name, command...
    local name="$1"; shift
    local log="$DF_TEST_TMP/log.$(echo "$name" | tr '/ ' '__')"
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        pass=$((pass + 1)); echo "ok   $name ($((SECONDS - t0))s)"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name ($((SECONDS - t0))s)"
        tail -n 40 "$log" | sed 's/^/     | /'
    fi
}

# Each group's wall time, for the summary (where `make test` spends its time).
group_t0=$SECONDS
group_done() { # name
    times+=("$1 $((SECONDS - group_t0)) s")
    echo "time: $1 $((SECONDS - group_t0)) s"
    group_t0=$SECONDS
}

if [ "$only" = all ] || [ "$only" = unit ]; then
    for b in build build-asan; do
        for t in "$b"/tests/test_*; do
            [ -x "$t" ] && run_one "$b/$(basename "$t")" "$t"
        done
    done
    group_done unit
fi
if [ "$only" = all ] || [ "$only" = cli ]; then
    for t in tests/cli/test_*.sh; do
        [ -f "$t" ] && run_one "$t" bash "$t"
    done
    group_done cli
fi
if [ "$only" = all ] || [ "$only" = train ]; then
    for t in tests/train/test_*; do
        case "$t" in
            *.py) run_one "$t" "$PYTHON" "$t" ;;
            *.sh) run_one "$t" bash "$t" ;;
        esac
    done
    group_done train
fi
if [ "$only" = all ] || [ "$only" = node ]; then
    for t in tests/node/test_*.mjs; do
        [ -f "$t" ] && run_one "$t" node "$t"
    done
    group_done node
fi

if [ "$only" = all ] || [ "$only" = arm ]; then
    if [ -x build-aarch64/deltafin ]; then
        run_one arm/unit.sh bash tests/arm/unit.sh
        run_one arm/logits.sh bash tests/arm/logits.sh
    elif [ "$only" = arm ]; then
        run_one arm bash -c 'echo "no build-aarch64/deltafin: make aarch64 builds it"; exit 1'
    fi
    group_done arm
fi

if [ "$only" = all ] || [ "$only" = fuzz ]; then
    for f in tests/fuzz/fuzz_*.c; do
        name=$(basename "$f" .c)
        [ -x "build-fuzz/fuzz/$name" ] && run_one "fuzz/$name" bash tests/fuzz/run.sh "${FUZZ_SECONDS:-5}" "${name#fuzz_}"
    done
    group_done fuzz
fi

rm -rf "$DF_TEST_TMP"
[ ${#times[@]} -gt 1 ] && (IFS=,; echo "time per group:${times[*]/#/ }")
[ ${#failed[@]} -gt 0 ] && printf 'failed: %s\n' "${failed[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# Every corrupted-checkpoint failure path gives a one-line error and exit 1 (release + ASan).
source "$(dirname "$0")/../lib.sh"
m="$DF_TEST_TMP/corrupt-src"
"$DF" synth --preset tiny --seed 3 --out "$m" --quiet
"$DF" inspect "$m" >/dev/null
exec "$PYTHON" "$(dirname "$0")/../tools/corrupt.py" "$m" "$DF_TEST_TMP/corrupt" "$DF" "$DF_ASAN"

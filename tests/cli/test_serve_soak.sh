#!/usr/bin/env bash
# deltafin serve under load: 200 sequential requests of every kind (whole, streamed, refused,
# abandoned mid-stream) leave the resident memory flat; the sanitizer build serves a mix of
# requests and shuts down without a leak or an error report.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/serve_soak"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 6 --out "$t/tiny" --quiet >/dev/null
"$PYTHON" "$(dirname "$0")/serve_http.py" "$DF" "$t/tiny" "$t" soak
"$PYTHON" "$(dirname "$0")/serve_http.py" "$DF" "$t/tiny" "$t" asan

#!/usr/bin/env bash
# deltafin serve over raw HTTP: malformed JSON and mistyped fields (400 naming the field),
# 404/405, 413 before the body is read, API keys, a stalled client timed out without slowing
# others, 429 while busy (Retry-After estimated from the running generation's tokens left and
# pace) and the --queue order, a client hanging up stops its generation, the exact-request memo
# and K3_SERVER_MAX_TOKENS.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/serve_http"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 5 --out "$t/tiny" --quiet >/dev/null
"$PYTHON" "$(dirname "$0")/serve_http.py" "$DF" "$t/tiny" "$t" http

#!/usr/bin/env bash
# deltafin serve under a crowd of slow clients at the default settings: 64 connections trickling
# one header byte every 2 s (reconnecting when cut), from one address and from eight, must not
# keep honest clients from being served (per-client connection limit, phase deadlines, room made
# for newcomers).
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/serve_slow"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 5 --out "$t/tiny" --quiet >/dev/null
"$PYTHON" "$(dirname "$0")/serve_http.py" "$DF" "$t/tiny" "$t" slow

#!/usr/bin/env bash
# The C forward pass against the independent fp64 NumPy reference (tests/reference/k3_ref.py):
# logits within 1e-4 x max(1, max|logit|) at every position, identical argmax everywhere and an
# identical 32-token greedy continuation. Checkpoints: tiny (padded A_log, MLA last layer, three
# AttnRes blocks), small (10 layers, 32 experts), a 13-layer small (four blocks, MLA at 4 8 12 13),
# tiny fed in chunks of 3 through the sanitizer build, and small with a 1024x embedding (synth
# --embed-scale: greedy output loops); both MLA cache layouts (K3_MLA_CACHE).
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/ref"
ref="$(dirname "$0")/../reference/compare.py"
"$DF" synth --preset tiny --seed 5 --out "$t/tiny" --quiet >/dev/null
"$DF" synth --preset small --seed 6 --out "$t/small" --quiet >/dev/null
"$DF" synth --preset small --layers 13 --seed 7 --out "$t/deep" --quiet >/dev/null
"$PYTHON" "$ref" --df "$DF" --model "$t/tiny" --tokens "1 2 3 4 5 6 7 8 9 10 11 12" --greedy 32
"$PYTHON" "$ref" --df "$DF" --model "$t/small" --tokens "5 17 300 42 42 42 7 1000 3 9 12 600 77 1 2 3" --greedy 32
"$PYTHON" "$ref" --df "$DF" --model "$t/deep" --tokens "900 4 4 4 81 20 1200 64 5" --greedy 32
"$PYTHON" "$ref" --df "$DF_ASAN" --model "$t/tiny" --tokens "700 3 3 3 515 1 2" --greedy 8 --chunk 3
# the MLA cache's two layouts (the runs above use the default, latent): expanded keys and values
K3_MLA_CACHE=expanded "$PYTHON" "$ref" --df "$DF" --model "$t/deep" --tokens "900 4 4 4 81 20 1200 64 5" --greedy 32
K3_MLA_CACHE=expanded "$PYTHON" "$ref" --df "$DF_ASAN" --model "$t/tiny" --tokens "700 3 3 3 515 1 2" --greedy 8 --chunk 3
# an embedding 1024x larger (synth --embed-scale, the model speculation is measured on) is still an
# ordinary checkpoint: same logits, and the same greedy loop, once around it and back
"$DF" synth --preset small --seed 6 --embed-scale 1024 --out "$t/loop" --quiet >/dev/null
"$PYTHON" "$ref" --df "$DF" --model "$t/loop" --tokens "5 17 300 42 7" --greedy 48

#!/usr/bin/env bash
# Properties of the forward pass that need no reference: prefilling in chunks of any size gives
# the same logits as one position at a time; any thread count gives bit-identical logits; runs
# repeat exactly; the A_log padding is ignored unless the compatibility switch asks for it.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/inv"
"$DF" synth --preset small --seed 11 --out "$t/m" --quiet >/dev/null
toks="5 17 300 42 42 42 7 1000 3 9 12 600 77 1 2 3 4 5 6 7"
logits() { "$DF" logits --model "$t/m" --tokens "$toks" --out "$t/$1" "${@:2}"; }
logits full
logits chunk1 --chunk 1
logits chunk7 --chunk 7
K3_THREADS=1 logits t1
K3_THREADS=2 logits t2
logits again
cmp "$t/full" "$t/chunk1"
cmp "$t/full" "$t/chunk7"
cmp "$t/t1" "$t/t2"
cmp "$t/full" "$t/t1"
cmp "$t/full" "$t/again"
# sanitizer build agrees bit for bit
"$DF_ASAN" logits --model "$t/m" --tokens "$toks" --out "$t/asan" --chunk 3
cmp "$t/full" "$t/asan"
# tiny stores A_log padded with non-zero values: per-channel reading must change the logits
"$DF" synth --preset tiny --seed 2 --out "$t/tiny" --quiet >/dev/null
"$DF" logits --model "$t/tiny" --tokens "1 2 3" --out "$t/head"
K3_A_LOG=per-channel "$DF" logits --model "$t/tiny" --tokens "1 2 3" --out "$t/chan"
if cmp -s "$t/head" "$t/chan"; then echo "K3_A_LOG=per-channel left the logits unchanged"; exit 1; fi
expect_fail "K3_A_LOG" env K3_A_LOG=bogus "$DF" logits --model "$t/tiny" --tokens "1" --out "$t/x"
# bad token ids and bad thread counts are refused with a message
expect_fail "not a token id" "$DF" logits --model "$t/tiny" --tokens "1 99999" --out "$t/x"
expect_fail "K3_THREADS" env K3_THREADS=zero "$DF" logits --model "$t/tiny" --tokens "1" --out "$t/x"
echo PASS

#!/usr/bin/env bash
# Router lookahead (K3_LOOKAHEAD, streaming store) only steers reads: logits and tokens are
# bit-identical with it on and off and to the mapped path, with every layer pinned (guesses at
# every layer) and with most layers streamed (guesses only where the next router is resident),
# also through K3_TRACE's wrapper; --stats reports the guess's recall, which must be real (above
# zero, below 100% on random weights) and absent when lookahead is off; --stats-json carries the
# same counts (phases.lookahead_guessed / lookahead_routed, zero when off).
source "$(dirname "$0")/../lib.sh"
export K3_CONTEXT=4096 # the budgets below are tight around the plan for this context
t="$DF_TEST_TMP/lookahead"
m="$t/small"
"$DF" synth --preset small --seed 11 --out "$m" --quiet >/dev/null
lt="$(seq 3 13 900 | tr '\n' ' ')"
prompt="5 17 300 42 42 42 7 1000 3 9 12 600 77"
K3_STORE=mapped "$DF" logits --model "$m" --tokens "$lt" --out "$t/mapped.bin" --chunk 16
K3_STORE=mapped "$DF" run --model "$m" --tokens "$prompt" --max-new 20 >"$t/mapped.tok"
for pin_ram in 10:0.150 5:0.1423; do
    pin=${pin_ram%:*} ram=${pin_ram#*:}
    for la in 0 1; do
        s=(K3_STORE=stream K3_RAM_GB=$ram K3_PIN_LAYERS=$pin K3_LOOKAHEAD=$la)
        env "${s[@]}" "$DF" logits --model "$m" --tokens "$lt" --out "$t/la.bin" --chunk 16
        cmp "$t/mapped.bin" "$t/la.bin"
        env "${s[@]}" K3_TRACE="$t/trace.jsonl" "$DF" run --model "$m" --tokens "$prompt" --max-new 20 --stats \
            --stats-json "$t/la.json" >"$t/la.tok" 2>"$t/la.err"
        cmp "$t/mapped.tok" "$t/la.tok"
        json=$("$PYTHON" -c 'import json, sys; p = json.load(open(sys.argv[1]))["phases"]; print(p["lookahead_guessed"], p["lookahead_routed"])' "$t/la.json")
        if [ $la = 1 ]; then
            expect_grep "router lookahead:" "$t/la.err"
            recall=$(sed -n 's/.*(recall \([0-9.]*\)%).*/\1/p' "$t/la.err")
            awk -v r="$recall" 'BEGIN { exit !(r > 0 && r < 100) }' || fail "lookahead recall $recall% is not in (0, 100)"
            expect_eq "$(sed -n 's/.*router lookahead: \([0-9]*\) of \([0-9]*\) routed.*/\1 \2/p' "$t/la.err")" "$json" \
                "--stats-json's lookahead guessed and routed (against --stats)"
        else
            expect_no_grep "router lookahead" "$t/la.err" || fail "--stats reports lookahead while it is off"
            expect_eq "0 0" "$json" "--stats-json's lookahead guessed and routed with lookahead off"
        fi
    done
done
"$DF_ASAN" logits --model "$m" --tokens "$lt" --out "$t/asan.bin" --chunk 16 </dev/null
cmp "$t/mapped.bin" "$t/asan.bin"
K3_STORE=stream K3_RAM_GB=0.150 K3_PIN_LAYERS=10 "$DF_ASAN" logits --model "$m" --tokens "$lt" --out "$t/asan.stream.bin" --chunk 16
cmp "$t/mapped.bin" "$t/asan.stream.bin"
expect_fail K3_LOOKAHEAD env K3_STORE=stream K3_LOOKAHEAD=2 "$DF" run --model "$m" --tokens 1 --max-new 1
echo PASS

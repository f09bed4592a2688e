#!/usr/bin/env bash
# Settings are parsed and validated once, before any command runs: a bad value stops every
# command (even one that never uses it, and a streaming setting with the mapped store) with one
# line naming the variable, exit status 1; `deltafin settings` lists every setting, hides
# secrets, and the README documents each one; values reach the engine (K3_KERNELS, K3_THREADS).
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/settings"
mkdir -p "$t"
"$DF" synth --preset tiny --seed 2 --out "$t/tiny" --quiet >/dev/null

# refused(VAR=VALUE, message, command...): exit 1, exactly one line on stderr, naming the variable
refused() {
    local assign="$1" msg="$2"
    shift 2
    if env "$assign" "$@" >"$t/out" 2>"$t/err"; then fail "$assign was accepted by $*"; fi
    [ "$(wc -l <"$t/err")" -eq 1 ] || fail "$assign: more than one line: $(cat "$t/err")"
    expect_grep -F "deltafin: $msg" "$t/err" || fail "$assign"
}
refused K3_THREADS=0 "K3_THREADS: '0' is not a thread count in 1..1024" "$DF" run --model "$t/tiny" --tokens 1
refused K3_IO_THREADS=0 "K3_IO_THREADS: '0' is not a thread count in 1..256" "$DF" synth --preset tiny --out "$t/never"
[ ! -e "$t/never" ] || fail "synth wrote a checkpoint despite a bad setting"
refused K3_CACHE_POLICY=fifo "K3_CACHE_POLICY: 'fifo' is not crf, lfu or lru" env K3_STORE=mapped "$DF" logits \
    --model "$t/tiny" --tokens 1 --out "$t/x"
refused K3_RAM_GB=lots "K3_RAM_GB: 'lots' is not a size in GB" "$DF" tokenize --model "$t/tiny" </dev/null
refused K3_HF_HOST=http://example.com "K3_HF_HOST: 'example.com': plain http:// is allowed only for loopback" \
    "$DF" inspect "$t/tiny"
refused K3_REASONING_EFFORT=medium "K3_REASONING_EFFORT: 'medium' is not low, high or max" "$DF" settings
refused K3_PIN_LAYERS=9 "K3_PIN_LAYERS: 9 is more than the model's 5 layers" env K3_STORE=stream "$DF" run \
    --model "$t/tiny" --tokens 1 --max-new 1

# every setting is listed, and documented in the README's table
"$DF" settings >"$t/list"
names=$(sed -n 's/^\([A-Z][A-Z0-9_]*\)=.*/\1/p' "$t/list")
[ "$(echo "$names" | wc -l)" -ge 39 ] || fail "deltafin settings lists $(echo "$names" | wc -l) settings"
readme="$(dirname "$0")/../../README.md"
for n in $names; do
    expect_grep "\`$n\`" "$readme" || fail "README.md does not document $n"
done
# secrets are never printed; set values are marked
DELTAFIN_API_KEY=sekrit-123 HF_TOKEN=hf_sekrit K3_THREADS=3 "$DF" settings >"$t/list"
expect_no_grep sekrit "$t/list" || fail "a secret was printed"
expect_grep '^DELTAFIN_API_KEY=(set, not shown)' "$t/list" || fail "the API key is not marked as set"
expect_grep '^DELTAFIN_THREADS=3   \[set\] by K3_THREADS' "$t/list" || fail "K3_THREADS=3 not shown as DELTAFIN_THREADS set by K3_THREADS"

# values reach the engine
K3_KERNELS=portable K3_THREADS=1 "$DF" run --model "$t/tiny" --tokens "1 2" --max-new 2 >/dev/null 2>"$t/err"
expect_grep "device cpu (portable kernels) | threads 1 |" "$t/err" || fail "K3_KERNELS/K3_THREADS not applied"
echo PASS

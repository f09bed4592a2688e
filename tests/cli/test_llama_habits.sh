#!/usr/bin/env bash
# A new user's llama.cpp commands either work or name the right option: -m -p -n -t -c --temp
# --top-p --seed --repeat-penalty together; a positional prompt; -ngl N (0: the CPU; more: the
# GPU, which a build without CUDA says it has not, then runs on the CPU) never read as "-n gl";
# -np N is serve's --parallel; llama.cpp options without meaning here say what to use instead.
# --repeat-penalty is lossy, labelled and reproducible (its logit arithmetic: unit/test_sampler).
set -euo pipefail
t="$DF_TEST_TMP/llama_habits"
rm -rf "$t"
mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
m="$t/m"
"$DF" synth --preset small --seed 4 --out "$m" --quiet

# expect STATUS TEXT COMMAND...: the command exits with STATUS and its stderr says TEXT ("": any)
expect() {
    local want="$1" text="$2" rc=0
    shift 2
    "$@" >"$t/out" 2>"$t/err" || rc=$?
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, wanted $want: $(cat "$t/err")"
    [ -z "$text" ] || grep -qF -- "$text" "$t/err" || fail "$*: stderr does not say '$text': $(cat "$t/err")"
}

# --- the options of a llama.cpp command line, all at once: the same text every time
llama=(-m "$m" -p "The capital of France is" -n 12 -t 1 -c 512 --temp 0.7 --top-p 0.9 --seed 3 --repeat-penalty 1.1
    -ngl 0 -q)
"$DF" run "${llama[@]}" >"$t/a"
"$DF" run "${llama[@]}" >"$t/b"
[ -s "$t/a" ] || fail "the llama.cpp command line wrote nothing"
cmp "$t/a" "$t/b" || fail "the seeded llama.cpp command line is not reproducible"
# --temp is --temperature
"$DF" run -m "$m" -p "The capital" -n 12 --temperature 0.7 --seed 3 -q >"$t/long"
"$DF" run -m "$m" -p "The capital" -n 12 --temp 0.7 --seed 3 -q >"$t/short"
cmp "$t/long" "$t/short" || fail "--temp is not --temperature"

# --- a positional prompt is the prompt
"$DF" run -m "$m" -p "The capital of France is" -n 12 -q >"$t/p"
"$DF" run -m "$m" "The capital of France is" -n 12 -q >"$t/pos"
cmp "$t/p" "$t/pos" || fail "run \"TEXT\" differs from run -p \"TEXT\""
expect 2 "the prompt is given twice" "$DF" run -m "$m" -p x "The cat"

# --- -ngl N: the device
expect 0 "" "$DF" run -m "$m" -p "The capital of France is" -n 12 -q -ngl 0
cmp "$t/p" "$t/out" || fail "-ngl 0 changed the text"
version=$("$DF" --version)
if [[ "$version" == *"CUDA: not built in"* ]]; then
    expect 0 "this build has no GPU backend (make cuda builds one): running on the CPU" \
        "$DF" run -m "$m" -p "The capital of France is" -n 12 -ngl 99
    cmp "$t/p" "$t/out" || fail "-ngl 99 on the CPU changed the text"
    expect 0 "" "$DF" run -m "$m" -p x -n 2 -q -ngl 99
    [ ! -s "$t/err" ] || fail "-q does not silence the -ngl note: $(cat "$t/err")"
fi
expect 2 "--n-gpu-layers: 'gl' is not a layer count" "$DF" run -m "$m" -p x -ngl gl
expect 2 "--gpu-layers: '-1' is not a layer count" "$DF" run -m "$m" -p x --gpu-layers -1

# --- -np N: serve's parallel slots (help exits before serving: the option was understood)
expect 0 "" "$DF" serve -m "$m" -np 2 --help
grep -q "^usage: deltafin serve" "$t/out" || fail "serve -np 2 --help: $(head -2 "$t/out")"
expect 2 "serve: --parallel: 'x' is not a whole number" "$DF" serve -m "$m" -np x
expect 2 "run: -np is not an option here (llama.cpp's parallel slots are an option of deltafin serve: --parallel N)" \
    "$DF" run -m "$m" -p x -np 2

# --- llama.cpp options that mean nothing here say what to use
expect 2 "-fa is not an option here (llama.cpp's flash attention" "$DF" run -m "$m" -p x -fa
expect 2 "-cnv is not an option here (for a conversation use deltafin chat)" "$DF" run -m "$m" -p x -cnv

# --- --repeat-penalty: lossy, labelled, reproducible; 1 is off
ids=$(printf '%s' "the the the the" | "$DF" tokenize -m "$m")
"$DF" run -m "$m" --tokens "$ids" -n 40 -q >"$t/greedy"
expect 0 "greedy with a repetition penalty (not exact)" "$DF" run -m "$m" --tokens "$ids" -n 40 --repeat-penalty 1.5
cp "$t/out" "$t/rp"
grep -qF "repeat penalty 1.5 over 64" "$t/err" || fail "the sampling note does not name the repetition penalty: $(cat "$t/err")"
if cmp -s "$t/greedy" "$t/rp"; then fail "--repeat-penalty 1.5 changed nothing"; fi
"$DF" run -m "$m" --tokens "$ids" -n 40 -q --repeat-penalty 1.5 --no-spec >"$t/rp2"
cmp "$t/rp" "$t/rp2" || fail "--repeat-penalty is not reproducible (with speculation off)"
"$DF" run -m "$m" --tokens "$ids" -n 40 -q --repeat-penalty 1.5 --repeat-last-n 0 >"$t/off"
cmp "$t/greedy" "$t/off" || fail "--repeat-last-n 0 did not turn the penalty off"
"$DF" run -m "$m" --tokens "$ids" -n 40 -q --repeat-penalty 1 >"$t/one"
cmp "$t/greedy" "$t/one" || fail "--repeat-penalty 1 is not greedy"
expect 2 "--repeat-penalty: 11 is outside 0..10" "$DF" run -m "$m" -p x --repeat-penalty 11
expect 2 "--repeat-last-n: -2 is not in -1..1048576" "$DF" run -m "$m" -p x --repeat-last-n -2
echo PASS

#!/usr/bin/env bash
# Which model a command uses: -m/--model, else DELTAFIN_ROOT, else the default install in
# $XDG_CACHE_HOME/deltafin, else the bundled model beside the build directory (found from the
# binary's own path) or in PREFIX/share/deltafin after `make install`; the start-up line says when
# the bundled one is used; nothing found is one line saying where it looked and what to run.
# Also `make install`: the binary, the bundled model, the man page and bash completion.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line (with where the model was found)
t="$DF_TEST_TMP/model_locate"
rm -rf "$t"
mkdir -p "$t"
root="$(cd "$(dirname "$0")/../.." && pwd)"
unset DELTAFIN_ROOT
export XDG_CACHE_HOME="$t/xdg-empty"

# A build tree of its own: build/deltafin and models/k3-mini (a synth model standing in for the
# bundled one), and a binary with nothing beside it.
mkdir -p "$t/tree/build" "$t/tree/models" "$t/lonely/bin"
cp "$DF" "$t/tree/build/deltafin"
cp "$DF" "$t/lonely/bin/deltafin"
"$DF" synth --preset small --seed 11 --out "$t/tree/models/k3-mini" --quiet >/dev/null
"$DF" synth --preset tiny --seed 12 --out "$t/other" --quiet >/dev/null
bundled="$t/tree/models/k3-mini"
prompt="The capital of France is"
printf '%s\n' "$prompt Paris, and the capital of Italy is Rome." >"$t/text.txt"

# --- nothing anywhere: one line, where it looked, what to run; exit 1
rc=0
(cd / && "$t/lonely/bin/deltafin" run -p "$prompt" -n 4) >"$t/out" 2>"$t/err" || rc=$?
[ "$rc" -eq 1 ] || fail "no model: exit $rc"
[ "$(wc -l <"$t/err")" -eq 1 ] || fail "no model: $(cat "$t/err")"
for want in "no model" "-m/--model DIR" "DELTAFIN_ROOT" "$t/xdg-empty/deltafin" "$t/lonely/models/k3-mini" \
    "$t/lonely/share/deltafin/models/k3-mini" "deltafin setup" "deltafin synth"; do
    expect_grep -F -- "$want" "$t/err" || fail "the no-model error does not say '$want'"
done

# --- the bundled model, from anywhere, for every command that reads a model
(cd / && "$t/tree/build/deltafin" run -p "$prompt" -n 8) >"$t/b.out" 2>"$t/b.err"
"$DF" run -m "$bundled" -p "$prompt" -n 8 >"$t/want"
cmp "$t/b.out" "$t/want"
expect_grep -F "model $bundled [the bundled k3-mini: no -m/--model or DELTAFIN_ROOT, nothing installed in $t/xdg-empty/deltafin]" \
    "$t/b.err" || fail "run's start-up line: $(cat "$t/b.err")"
echo hi | "$t/tree/build/deltafin" chat -n 2 >/dev/null 2>"$t/c.err"
expect_grep -F "[the bundled k3-mini" "$t/c.err" || fail "chat"
"$t/tree/build/deltafin" nll --text "$t/text.txt" >/dev/null 2>"$t/n.err"
expect_grep -F "[the bundled k3-mini" "$t/n.err" || fail "nll"
"$t/tree/build/deltafin" logits --tokens "1 2 3" -o "$t/l.bin" 2>"$t/l.err"
expect_grep -F "[the bundled k3-mini" "$t/l.err" || fail "logits"
"$t/tree/build/deltafin" serve --port 0 >"$t/s.out" 2>"$t/s.err" &
spid=$!
for _ in $(seq 300); do grep -q "serve: listening on" "$t/s.err" && break; sleep 0.1; done
kill "$spid" 2>/dev/null || true
wait "$spid" 2>/dev/null || true
expect_grep -F "[the bundled k3-mini" "$t/s.err" || fail "serve"
"$t/tree/build/deltafin" inspect | expect_grep -F "checkpoint  $bundled: valid" || fail "inspect does not use the bundled model"
# the commands that change an install never take the bundled model
rc=0
"$t/tree/build/deltafin" convert-spine --no-check >"$t/cs.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "convert-spine wrote into the bundled model"
[ ! -e "$bundled/deltafin-int8" ] || fail "convert-spine wrote into the bundled model"
expect_grep -F "$t/xdg-empty/deltafin" "$t/cs.out" || fail "convert-spine"
# doctor with nothing installed checks the bundled model run uses, saying there is no install
"$t/tree/build/deltafin" doctor >"$t/d.out" 2>&1 || fail "doctor refused a working bundled model: $(cat "$t/d.out")"
expect_grep -F "no install in $t/xdg-empty/deltafin" "$t/d.out" || fail "doctor did not look at the default install"

# --- an install in the default place wins over the bundled model; DELTAFIN_ROOT over that; -m over all
mkdir -p "$t/xdg"
cp -r "$t/other" "$t/xdg/deltafin"
XDG_CACHE_HOME="$t/xdg" "$t/tree/build/deltafin" run --tokens "1 2" -n 1 >/dev/null 2>"$t/e"
expect_grep "model $t/xdg/deltafin (5 layers" "$t/e" || fail "default install not used"
expect_no_grep "bundled" "$t/e" || fail "an installed model was called bundled"
XDG_CACHE_HOME="$t/xdg" DELTAFIN_ROOT="$bundled" "$t/tree/build/deltafin" run --tokens "1 2" -n 1 >/dev/null 2>"$t/e"
expect_grep "model $bundled (10 layers" "$t/e" || fail "DELTAFIN_ROOT not used"
DELTAFIN_ROOT="$bundled" "$DF" run -m "$t/other" --tokens "1 2" -n 1 >/dev/null 2>"$t/e"
expect_grep "model $t/other (5 layers" "$t/e" || fail "-m did not win over DELTAFIN_ROOT"

# --- what -m may be: a directory, a config.json (its directory), nothing else
"$DF" run -m "$t/other/config.json" --tokens "1 2" -n 3 >"$t/cj" 2>"$t/e"
"$DF" run -m "$t/other" --tokens "1 2" -n 3 >"$t/dir"
cmp "$t/cj" "$t/dir"
expect_grep -F "[the directory of $t/other/config.json]" "$t/e" || fail "config.json path"
one_line() { # message, command...
    local msg="$1"
    shift
    if "$@" >/dev/null 2>"$t/e"; then fail "accepted: $*"; fi
    [ "$(wc -l <"$t/e")" -eq 1 ] || fail "$*: not one line: $(cat "$t/e")"
    expect_grep -F -- "$msg" "$t/e" || fail "$*"
}
one_line "$t/other/model.safetensors.index.json (-m) is a file: give the model's directory" \
    "$DF" run -m "$t/other/model.safetensors.index.json" -p x
one_line "$t/nowhere (--model): no such directory" "$DF" run --model "$t/nowhere" -p x
mkdir -p "$t/emptydir"
one_line "$t/emptydir (DELTAFIN_ROOT) has no config.json: not a model directory" env DELTAFIN_ROOT="$t/emptydir" "$DF" run -p x
one_line "$t/emptydir (--root) has no config.json" "$DF" nll --root "$t/emptydir" --text "$t/text.txt"

# --- make install: the binary finds the installed model; the man page and completion work
make -s -C "$root" install PREFIX="$t/prefix" BUNDLED_MODEL="$bundled" >"$t/install.log" 2>&1 ||
    fail "make install: $(cat "$t/install.log")"
p="$t/prefix"
[ -x "$p/bin/deltafin" ] && [ -f "$p/share/deltafin/models/k3-mini/config.json" ] &&
    [ -f "$p/share/man/man1/deltafin.1" ] && [ -f "$p/share/bash-completion/completions/deltafin" ] ||
    fail "make install left out something: $(find "$p" -maxdepth 4)"
(cd / && "$p/bin/deltafin" run -p "$prompt" -n 8) >"$t/i.out" 2>"$t/i.err"
cmp "$t/i.out" "$t/want"
expect_grep -F "model $p/share/deltafin/models/k3-mini [the bundled k3-mini" "$t/i.err" || fail "installed"
groff -man -Tutf8 -ww -z "$p/share/man/man1/deltafin.1" 2>"$t/groff" && [ ! -s "$t/groff" ] ||
    fail "the man page has roff warnings: $(cat "$t/groff")"
man -l "$p/share/man/man1/deltafin.1" 2>/dev/null >"$t/man.txt"
for c in run chat serve setup settings; do
    expect_grep -E "deltafin +$c +\[" "$t/man.txt" || fail "the man page lacks $c"
done
for want in "--ctx-size N" "DELTAFIN_THREADS"; do expect_grep -- "$want" "$t/man.txt" || fail "the man page lacks the settings"; done
complete_words() { # words...: what completing the last one offers
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _deltafin; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$p/share/bash-completion/completions/deltafin" "$@"
}
[ "$(complete_words "$p/bin/deltafin" ru)" = run ] || fail "completion of 'ru': $(complete_words "$p/bin/deltafin" ru)"
complete_words "$p/bin/deltafin" run --max | expect_grep -x -- "--max-new" || fail "completion of run --max"
complete_words "$p/bin/deltafin" chat --no-sp | expect_grep -x -- "--no-spec" || fail "completion of chat --no-sp"
complete_words "$p/bin/deltafin" run -- | expect_grep -x -- "--ctx-size" || fail "completion of run --"
make -s -C "$root" uninstall PREFIX="$t/prefix" >/dev/null
[ ! -e "$p/bin/deltafin" ] && [ ! -e "$p/share/deltafin" ] || fail "make uninstall left files"
echo PASS

#!/usr/bin/env bash
# What the program writes never destroys what it did not make: output paths that are named pipes,
# devices, links, directories or planted temporaries; synth over an existing model; setup into a
# directory of someone else's files; a trace that cannot be written; messages quoting a CRLF file.
source "$(dirname "$0")/install_lib.sh"
T="$DF_TEST_TMP/outputs"; rm -rf "$T"; mkdir -p "$T"
m="$T/m"
"$DF" synth --preset tiny --seed 3 --out "$m" --quiet >/dev/null
V=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['text_config']['vocab_size'])" "$m/config.json")
BYTES=$((2 * V * 4))
logits() { "$DF" logits --model "$m" --tokens "1 2" --out "$1" 2>"$T/err"; }

# a named pipe: the logits go through it to its reader, and it stays a pipe
mkfifo "$T/fifo"
timeout 60 cat "$T/fifo" >"$T/fifo.read" & reader=$! # bounded: a replaced pipe is never opened for writing
logits "$T/fifo" || { cat "$T/err"; fail "logits into a named pipe"; }
[ -p "$T/fifo" ] || { kill "$reader"; fail "the named pipe was replaced by a regular file"; }
wait "$reader" || fail "the pipe's reader ended with status $?"
[ "$(stat -c %s "$T/fifo.read")" -eq "$BYTES" ] || fail "the pipe's reader got $(stat -c %s "$T/fifo.read") bytes, not $BYTES"
logits "$T/plain.f32" || fail "logits into a new file"
cmp "$T/fifo.read" "$T/plain.f32" || fail "bytes through the pipe differ from the file's"

# a character device (made here when allowed, as a stand-in for /dev/null): written through
if mknod "$T/null" c 1 3 2>/dev/null; then
    logits "$T/null" || { cat "$T/err"; fail "logits into a character device"; }
    [ -c "$T/null" ] || fail "the character device was replaced by a regular file"
fi
logits /dev/null || fail "logits into /dev/null"
[ -c /dev/null ] || fail "/dev/null is no longer a character device"

# a symbolic link: the file it points to receives the logits (keeping its permissions); the link stays
echo old >"$T/target.f32"; chmod 640 "$T/target.f32"; ln -s target.f32 "$T/link.f32"
logits "$T/link.f32" || { cat "$T/err"; fail "logits into a symbolic link"; }
[ -L "$T/link.f32" ] || fail "the symbolic link was replaced by a regular file"
cmp "$T/target.f32" "$T/plain.f32" || fail "the link's target does not hold the logits"
[ "$(stat -c %a "$T/target.f32")" = 640 ] || fail "the target's permissions changed to $(stat -c %a "$T/target.f32")"
ln -s missing.f32 "$T/dangling.f32"
if logits "$T/dangling.f32"; then fail "a dangling link must be refused"; fi
expect_grep "dangling.f32: a symbolic link to a file that cannot be reached" "$T/err" || fail "dangling link message"

# a directory is refused, untouched
mkdir "$T/dir"; touch "$T/dir/keep"
if logits "$T/dir"; then fail "a directory must be refused"; fi
expect_grep "is a directory: refusing to write over it" "$T/err" || fail "directory message"
[ -f "$T/dir/keep" ] || fail "the directory was replaced"

# a link planted where the temporary goes does not redirect the write to its target
echo victim >"$T/victim"; ln -s victim "$T/out.f32.tmp"
logits "$T/out.f32" || { cat "$T/err"; fail "logits with a planted temporary link"; }
[ "$(cat "$T/victim")" = victim ] || fail "a link planted at the temporary path made the write truncate its target"
cmp "$T/out.f32" "$T/plain.f32" || fail "output after a planted link"

# synth never writes over an existing model unless told to
sum() { (cd "$m" && sha256sum config.json model.safetensors.index.json model-*.safetensors); }
before=$(sum)
if "$DF" synth --preset small --seed 9 --out "$m" --quiet >/dev/null 2>"$T/err"; then fail "synth over a model must be refused"; fi
expect_grep "is not empty .*--force" "$T/err" || fail "synth refusal message"
[ "$(sum)" = "$before" ] || fail "a refused synth changed the model"
"$DF" synth --preset tiny --seed 4 --out "$m" --quiet --force >/dev/null || fail "synth --force"
[ "$(sum)" != "$before" ] || fail "synth --force did not replace the model"
"$DF" inspect "$m" >/dev/null || fail "the model replaced by synth --force is not valid"

# setup does not install into a directory of someone else's files
make_source "$T"
start_nginx "$T/www"
mkdir -p "$T/project"; echo '{"mine": true}' >"$T/project/config.json"
if "$DF" setup --stream -m "$T/project" >"$T/setup.out" 2>&1; then fail "setup into a foreign directory must be refused"; fi
expect_grep "not empty and holds no deltafin install (it holds config.json).*--force" "$T/setup.out" || fail "setup refusal message"
[ "$(cat "$T/project/config.json")" = '{"mine": true}' ] || fail "a refused setup changed config.json"
[ "$(ls "$T/project")" = config.json ] || fail "a refused setup wrote files"
# the default install directory ($XDG_CACHE_HOME/deltafin) is no exception
mkdir -p "$T/xdg/deltafin"; echo notes >"$T/xdg/deltafin/notes.txt"
if env -u DELTAFIN_ROOT XDG_CACHE_HOME="$T/xdg" "$DF" setup --stream >"$T/setup.out" 2>&1; then fail "setup into a foreign default directory must be refused"; fi
expect_grep "$T/xdg/deltafin is not empty and holds no deltafin install (it holds notes.txt)" "$T/setup.out" || fail "default directory refusal message"
[ "$(ls "$T/xdg/deltafin")" = notes.txt ] || fail "a refused setup wrote into the default directory"
if "$DF" setup --stream --dry-run --root "$T/project" >"$T/setup.out" 2>&1; then fail "a dry run into a foreign directory must be refused too"; fi
"$DF" setup --stream --root "$T/project" --force >"$T/setup.out" 2>&1 || { cat "$T/setup.out"; fail "setup --force"; }
"$DF" setup --stream --root "$T/project" >"$T/setup.out" 2>&1 || { cat "$T/setup.out"; fail "setup again into its own install"; }
"$DF" setup --stream --root "$T/new/sub" >"$T/setup.out" 2>&1 || { cat "$T/setup.out"; fail "setup into a new directory"; }
# a shard of an install replaced by a named pipe is never read from (no hang) nor written into
rm "$T/new/sub/model-00002-of-000005.safetensors"; mkfifo "$T/new/sub/model-00002-of-000005.safetensors"
for cmd in fetch "setup --stream" doctor; do
    if timeout 20 "$DF" $cmd --root "$T/new/sub" >"$T/setup.out" 2>&1; then fail "$cmd used a named pipe as a shard"; fi
    expect_grep "model-00002-of-000005.safetensors: not a regular file" "$T/setup.out" || fail "$cmd: shard pipe message"
done
[ -p "$T/new/sub/model-00002-of-000005.safetensors" ] || fail "the named pipe was replaced"

# a router trace that cannot be written fails the command
if K3_TRACE=/dev/full "$DF" run --model "$m" --prompt hi --max-new 2 >/dev/null 2>"$T/err"; then
    fail "run with an unwritable K3_TRACE must fail"
fi
expect_grep "K3_TRACE: cannot write the trace to /dev/full" "$T/err" || fail "trace failure message"

# a CRLF tokenizer file: the message quotes the line with its carriage return escaped, on one line
cp -r "$m" "$T/crlf"; sed -i 's/$/\r/' "$T/crlf/tiktoken.model"
if echo hi | "$DF" tokenize --model "$T/crlf" >/dev/null 2>"$T/err"; then fail "a CRLF tokenizer must be refused"; fi
[ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; fail "the message is not one line"; }
expect_no_grep $'\r' "$T/err" || fail "the message holds a raw carriage return"
expect_grep -F "rank '0\\r' is not a decimal number" "$T/err" || fail "CRLF message"
echo ok

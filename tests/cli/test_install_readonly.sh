#!/usr/bin/env bash
# An install made by root with default permissions is used read-only: through a read-only bind
# mount (a mount namespace, unshare -m) and by another user (nobody, through setpriv). A full
# install runs (run, chat, serve, logits equal to the source's), `fetch` finds nothing to do and
# `doctor` says ok and that the directory is read-only. A streaming install runs what its local
# experts cover; a missing expert is one line naming the directory and what to do, and so are
# `fetch` and `setup`; `doctor` reports that it cannot be completed from here. Nothing in the
# installs changes.
source "$(dirname "$0")/install_lib.sh"
set -o pipefail
T="$DF_TEST_TMP/inst_ro"; rm -rf "$T"; mkdir -p "$T"
expect() { grep -q -- "$1" "$2" || { cat "$2"; fail "${3:-expected '$1'}"; }; }
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (a mount namespace and a second user); CI runs as root"; exit 0; fi
can_unshare=1
unshare -m true 2>"$T/unshare.err" || can_unshare=0
# the installs live where another user may read them, its outputs where it may write them (the
# test directory is private)
S=$(mktemp -d /tmp/deltafin-ro.XXXXXX) W=$(mktemp -d /tmp/deltafin-ro-out.XXXXXX)
trap 'cleanup; rm -rf "$S" "$W"' EXIT
chmod 755 "$S"
chmod 777 "$W"
cp "$DF" "$S/deltafin"; X="$S/deltafin"
make_source "$T"
start_nginx "$T/www"
TOKENS="5 17 42 99 7" OTHER="3 1 4 1 5 9 2 6 5 3 5 8 9 7 9"
"$DF" logits --model "$SRC" --tokens "$TOKENS" --out "$T/src.f32" 2>/dev/null || fail "logits of the source"
"$X" setup --full --root "$S/full" >/dev/null 2>&1 || fail "full setup"
"$X" setup --stream --root "$S/stream" >/dev/null 2>&1 || fail "streaming setup"
"$X" logits --model "$S/stream" --tokens "$TOKENS" --out "$T/w.f32" 2>/dev/null || fail "fetching the experts of TOKENS"
cmp "$T/w.f32" "$T/src.f32" || fail "streaming logits (writable)"
find "$S/full" "$S/stream" -type f -exec md5sum {} + | sort >"$T/sums.before"

# as_ro ROLE COMMAND...: runs the command with the installs read-only to it (RO_EXEC=exec: in place
# of the calling shell, so that a background job's $! is the command's own process)
as_ro() {
    local role="$1"; shift
    if [ "$role" = mount ]; then
        ${RO_EXEC:-} unshare -m -- bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"' ro "$S" "$@"
    else
        HOME="$W/home" XDG_STATE_HOME="$W/state" ${RO_EXEC:-} setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
    fi
}

check_role() { # mount | user
    local role="$1" why=Read-only; [ "$role" = user ] && why="Permission denied"
    local o="$W/$role"; mkdir -p "$o"; chmod 777 "$o"
    echo "== $role: a full install"
    as_ro "$role" "$X" logits --model "$S/full" --tokens "$TOKENS" --out "$o/full.f32" 2>"$o/logits.err" \
        || { cat "$o/logits.err"; fail "$role: logits on a full install"; }
    cmp "$o/full.f32" "$T/src.f32" || fail "$role: logits of the full install differ from the source's"
    as_ro "$role" "$X" run --model "$S/full" -p "The capital" -n 6 >"$o/run.out" 2>"$o/run.err" \
        || { cat "$o/run.err"; fail "$role: run on a full install"; }
    [ -s "$o/run.out" ] || fail "$role: run printed nothing"
    echo "hello" | as_ro "$role" "$X" chat --model "$S/full" -n 6 >"$o/chat.out" 2>"$o/chat.err" \
        || { cat "$o/chat.err"; fail "$role: chat on a full install"; }
    local port; port=$(free_port)
    RO_EXEC=exec as_ro "$role" "$X" serve --model "$S/full" --port "$port" >"$o/serve.out" 2>"$o/serve.err" &
    local spid=$!
    PIDS+=("$spid")
    for _ in $(seq 300); do grep -q "serve: listening on" "$o/serve.err" && break; kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    grep -q "serve: listening on" "$o/serve.err" || { cat "$o/serve.err"; fail "$role: serve did not start"; }
    "$PYTHON" - "$port" <<'PY' || { cat "$o/serve.err"; fail "$role: a completion from serve"; }
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/v1"
model = json.load(urllib.request.urlopen(base + "/models", timeout=60))["data"][0]["id"]
req = urllib.request.Request(base + "/completions", method="POST",
                             data=json.dumps({"model": model, "prompt": "The capital", "max_tokens": 4}).encode(),
                             headers={"Content-Type": "application/json"})
body = json.load(urllib.request.urlopen(req, timeout=60))
assert body["usage"]["completion_tokens"] >= 1 and body["choices"][0]["text"], body
PY
    kill "$spid"; wait "$spid" 2>/dev/null || true
    if kill -0 "$spid" 2>/dev/null; then fail "$role: serve did not stop"; fi
    as_ro "$role" "$X" fetch --root "$S/full" >"$o/fetch.full" 2>&1 || { cat "$o/fetch.full"; fail "$role: fetch on a complete install"; }
    expect "0 B to fetch" "$o/fetch.full"
    as_ro "$role" "$X" doctor --root "$S/full" >"$o/doctor.full" 2>&1 || { cat "$o/doctor.full"; fail "$role: doctor on a full install"; }
    expect "^access: read-only here ($why.*): fine for a complete install" "$o/doctor.full"
    expect "^ok$" "$o/doctor.full"

    echo "== $role: a streaming install"
    as_ro "$role" "$X" logits --model "$S/stream" --tokens "$TOKENS" --out "$o/stream.f32" 2>"$o/stream.err" \
        || { cat "$o/stream.err"; fail "$role: logits needing only local experts"; }
    cmp "$o/stream.f32" "$T/src.f32" || fail "$role: streaming logits differ from the source's"
    if as_ro "$role" "$X" run --model "$S/stream" --tokens "$OTHER" -n 2 >/dev/null 2>"$o/other.err"; then
        fail "$role: a run needing missing experts succeeded"
    fi
    expect "^streaming install: .*; the install is not writable here ($why.*): a missing expert is an error" "$o/other.err" \
        "$role: the start-up reminder"
    expect "^deltafin: layer [0-9]* needs experts this install does not hold: $S/stream is not writable here ($why.*): fetching what the install lacks needs write access to it; run .deltafin fetch --root $S/stream. as a user who may write there" \
        "$o/other.err" "$role: the missing expert's message"
    [ "$(grep -c "^deltafin: layer" "$o/other.err")" -eq 1 ] || { cat "$o/other.err"; fail "$role: not one line"; }
    for cmd in fetch setup; do
        if as_ro "$role" "$X" $cmd --root "$S/stream" >"$o/$cmd.out" 2>&1; then fail "$role: $cmd into a read-only install succeeded"; fi
        expect "^deltafin: .*$S/stream is not writable here ($why.*): $cmd needs write access to it; run it as a user who may write there" \
            "$o/$cmd.out" "$role: $cmd's message"
    done
    if as_ro "$role" "$X" doctor --root "$S/stream" >"$o/doctor.stream" 2>&1; then
        cat "$o/doctor.stream"; fail "$role: doctor passed a streaming install that cannot be completed"
    fi
    expect "^READ-ONLY $S/stream ($why.*): its [0-9]* missing experts cannot be fetched from here" "$o/doctor.stream"
}

if [ "$can_unshare" = 1 ]; then
    check_role mount
else
    echo "SKIP the read-only mount: unshare -m is not possible here ($(cat "$T/unshare.err"))"
fi
check_role user
find "$S/full" "$S/stream" -type f -exec md5sum {} + | sort >"$T/sums.after"
diff "$T/sums.before" "$T/sums.after" || fail "a read-only use changed the installs"
echo ok

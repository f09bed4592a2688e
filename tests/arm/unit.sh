#!/usr/bin/env bash
# The unit tests of the AArch64 build (make aarch64), each under qemu-user, as many at a time as
# there are cores (qemu runs them 5-200x slower than the machine would). Prints one line per
# program and, for a failure, the end of its output; exits 1 if any failed.
set -eu
cd "$(dirname "$0")/../.."
t="$DF_TEST_TMP/arm_unit"
mkdir -p "$t"
# the slowest first (long double is software on AArch64, and then emulated), so that the others
# fill the cores while they run
progs=()
for p in build-aarch64/tests/test_{exactmath,tokenizer_encode,matcher,devpass,spec} build-aarch64/tests/test_*; do
    case " ${progs[*]} " in *" $p "*) continue ;; esac
    case "$p" in *.d) ;; *) [ -x "$p" ] && progs+=("$p") ;; esac
done
[ ${#progs[@]} -gt 0 ] || { echo "FAIL: no unit tests in build-aarch64/tests (make aarch64)"; exit 1; }
# (the arm64 loader and libraries are Debian's multiarch ones, where qemu finds them without -L)
one() { # program: runs it, leaves its output in $t/NAME.log and its status in $t/NAME.rc
    local name
    name=$(basename "$1")
    local t0=$SECONDS
    if qemu-aarch64 "$1" >"$t/$name.log" 2>&1; then echo 0 >"$t/$name.rc"; else echo $? >"$t/$name.rc"; fi
    echo $((SECONDS - t0)) >"$t/$name.s"
}
export -f one
export t
printf '%s\n' "${progs[@]}" | xargs -P "$(nproc)" -I{} bash -c 'one "$1"' _ {}
failed=0
for p in "${progs[@]}"; do
    name=$(basename "$p")
    if [ "$(cat "$t/$name.rc")" = 0 ]; then
        echo "ok   qemu $name ($(cat "$t/$name.s")s): $(tail -n 1 "$t/$name.log")"
    else
        echo "FAIL qemu $name (status $(cat "$t/$name.rc"))"
        tail -n 20 "$t/$name.log" | sed 's/^/     | /'
        failed=1
    fi
done
exit "$failed"

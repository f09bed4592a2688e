#!/usr/bin/env bash
# Installs the dependencies (Debian/Ubuntu packages, and the Node.js test peers for the tests).
#   scripts/install-deps.sh build   what building deltafin needs (make demo)
#   scripts/install-deps.sh test    that and what the tests need (make test; the default)
#   scripts/install-deps.sh bench   the build's and what the benchmarks of bench/ use (fio for the
#                                   I/O floor of bench_stream.sh, GNU time, Python with NumPy)
# Safe to run repeatedly; does nothing that is already done, so it needs neither root nor the
# network when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-test}"
build=(build-essential pkg-config libjansson-dev libpcre2-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev
       liburing-dev libedit-dev)
tests=(python3 python3-numpy python3-torch nginx-light time tmux groff-base xz-utils clang-14 libclang-rt-14-dev)
bench=(python3 python3-numpy time fio)
case "$what" in
build) pkgs=("${build[@]}") ;;
test) pkgs=("${build[@]}" "${tests[@]}") ;;
bench) pkgs=("${build[@]}" "${bench[@]}") ;;
*) echo "usage: scripts/install-deps.sh [build|test|bench]" >&2; exit 2 ;;
esac
missing=()
# (the native architecture's name too: with a cross build's copy of a package installed, the bare
# name is ambiguous to dpkg)
native=$(dpkg --print-architecture)
installed() { dpkg -s "$1" >/dev/null 2>&1 || dpkg -s "$1:$native" >/dev/null 2>&1; }
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
# Node.js may come from another source than Debian (it brings npm along): only install if absent.
if [ "$what" = test ]; then { command -v node && command -v npm; } >/dev/null 2>&1 || missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# (again when a dependency package.json declares is missing from node_modules)
node_missing() {
    [ ! -d tests/node/node_modules ] || (cd tests/node && node -e '
        const deps = Object.keys(require("./package.json").dependencies || {});
        process.exit(deps.every((d) => require("fs").existsSync("node_modules/" + d)) ? 1 : 0);')
}
if [ "$what" = test ] && [ -f tests/node/package.json ] && node_missing; then
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi

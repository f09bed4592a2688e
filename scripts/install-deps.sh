#!/usr/bin/env bash
# Installs the build and test dependencies (Debian/Ubuntu packages and the Node.js test peers).
# Safe to run repeatedly; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential pkg-config libjansson-dev libpcre2-dev libcurl4-openssl-dev libmicrohttpd-dev
      liburing-dev python3 python3-numpy python3-torch nginx-light time tmux groff-base)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js may come from another source than Debian (it brings npm along): only install if absent.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
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
if [ -f tests/node/package.json ] && node_missing; then
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi

#!/usr/bin/env bash
# The two ends of `make macos-check` (the Makefile compiles and links in between):
#   scripts/macos_check.sh prepare DIR   DIR/include: links to Debian's headers of the libraries
#                                        deltafin uses (they are portable) and nothing else, so that
#                                        a source file that needs a Linux-only header (liburing, the
#                                        C library's) fails to compile;
#                                        DIR/stubs: for each library, a text stub (.tbd, what Apple's
#                                        SDKs ship instead of libraries) that exports every symbol
#                                        Debian's build of it exports, under the name Homebrew
#                                        installs it by: the link resolves each library call
#                                        against the library's real interface (a misspelt or
#                                        Linux-only function fails it), and the executable names
#                                        the libraries as a Mac would load them
#   scripts/macos_check.sh binary FILE   checks that FILE is a Mach-O 64-bit arm64 executable
set -euo pipefail
fail() { echo "macos-check: $*" >&2; exit 1; }
multiarch=$(gcc -print-multiarch) # where Debian keeps what differs by architecture

headers() { # DIR
    local dir="$1" h
    rm -rf "$dir"
    mkdir -p "$dir/openssl"
    for h in jansson.h jansson_config.h pcre2.h microhttpd.h histedit.h; do
        [ -f "/usr/include/$h" ] || fail "/usr/include/$h is missing (scripts/install-deps.sh build)"
        ln -s "/usr/include/$h" "$dir/$h"
    done
    [ -d "/usr/include/$multiarch/curl" ] || fail "/usr/include/$multiarch/curl is missing (libcurl4-openssl-dev)"
    ln -s "/usr/include/$multiarch/curl" "$dir/curl"
    # OpenSSL's headers, with the two that describe its build from the architecture's folder
    for h in /usr/include/openssl/*.h "/usr/include/$multiarch/openssl/"*.h; do ln -sf "$h" "$dir/openssl/"; done
}

stub() { # DIR LIBRARY FORMULA: DIR/libLIBRARY.tbd
    local so="/usr/lib/$multiarch/lib$2.so" syms
    [ -e "$so" ] || fail "$so is missing (scripts/install-deps.sh build)"
    # the defined dynamic symbols (functions and data), without their version, as Mach-O names them
    syms=$(nm -D --defined-only "$so" | awk 'NF == 3 && $2 != "A" { sub(/@.*/, "", $3); print "_" $3 }' | sort -u | paste -sd, - | sed 's/,/, /g')
    [ -n "$syms" ] || fail "$so exports nothing"
    cat >"$1/lib$2.tbd" <<TBD
--- !tapi-tbd
tbd-version:     4
targets:         [ arm64-macos ]
install-name:    '/opt/homebrew/opt/$3/lib/lib$2.dylib'
exports:
  - targets:         [ arm64-macos ]
    symbols:         [ $syms ]
...
TBD
}

case "${1:-}" in
prepare)
    headers "$2/include"
    mkdir -p "$2/stubs"
    stub "$2/stubs" jansson jansson
    stub "$2/stubs" pcre2-8 pcre2
    stub "$2/stubs" curl curl
    stub "$2/stubs" crypto openssl@3
    stub "$2/stubs" microhttpd libmicrohttpd
    stub "$2/stubs" edit libedit
    ;;
binary)
    file="$2"
    [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -gt 16 ] || fail "$file was not written"
    # mach_header_64: magic 0xfeedfacf, cputype CPU_TYPE_ARM64 (0x0100000c), filetype MH_EXECUTE (2),
    # little-endian 32-bit words at offsets 0, 4 and 12
    read -r magic cpu _ type < <(od -A n -t x4 -N 16 "$file")
    [ "$magic $cpu $type" = "feedfacf 0100000c 00000002" ] ||
        fail "$file is not a Mach-O arm64 executable (header words $magic $cpu $type)"
    echo "macos-check: $file is a Mach-O 64-bit arm64 executable ($(stat -c %s "$file") bytes)"
    ;;
*) echo "usage: scripts/macos_check.sh prepare DIR | binary FILE" >&2; exit 2 ;;
esac

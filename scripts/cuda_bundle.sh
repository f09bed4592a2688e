#!/usr/bin/env bash
# Packs a CUDA build to run on a GPU machine that lacks the Debian libraries it links against
# (libmicrohttpd, liburing, libcurl, libedit, libjansson, libpcre2 and their dependencies): the
# binaries, stripped, and every shared library `ldd` names except glibc's and the C++ runtime's,
# xz-compressed into one file, with a runner beside it.
#
#   scripts/cuda_bundle.sh OUT_DIR [BINARY...]   (default binaries: build-cuda/deltafin and
#                                                 build-cuda/bench/bench_device)
#   OUT_DIR/run.sh COMMAND [ARGS...]             on the GPU machine: unpacks into OUT_DIR/bin and
#                                                 OUT_DIR/lib, drops the bundled libraries that
#                                                 machine already has, runs COMMAND with OUT_DIR/bin
#                                                 first on PATH and OUT_DIR/lib on LD_LIBRARY_PATH
#
# The libraries go on LD_LIBRARY_PATH for COMMAND and what it starts; a Python started from it (as
# tests/cuda/device_check.sh starts tests/reference/compare.py) links none of them, since only
# libraries the machine does not have are left in OUT_DIR/lib. OUT_DIR must be new or empty.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/cuda_bundle.sh OUT_DIR [BINARY...]" >&2; exit 2; }
out="$1"
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build-cuda/deltafin build-cuda/bench/bench_device)
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
    echo "cuda_bundle: $out is not empty (give a new or empty folder)" >&2
    exit 1
fi
for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "cuda_bundle: $b: not an executable (build it with make cuda)" >&2; exit 1; }
done

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${bins[@]}"; do
    strip -o "$stage/bin/$(basename "$b")" "$b"
    # ldd prints "name => /path (address)" for each library it resolved, "name => not found" otherwise
    if ldd "$b" | grep -q 'not found'; then
        echo "cuda_bundle: $b: a library it needs is missing here: $(ldd "$b" | grep 'not found' | head -1)" >&2
        exit 1
    fi
    while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux*) ;; # glibc
        libstdc++.so.* | libgcc_s.so.*) ;;                                                              # the C++ runtime
        libcublas*.so.* | libcudart*.so.*) ;; # CUDA's own (hundreds of MB): run.sh finds the machine's
        *) cp -L "$lib" "$stage/lib/" ;;
        esac
    done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
done

mkdir -p "$out"
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Unpacks bundle.tar.xz beside this file (once), drops the bundled libraries this machine already
# has, then runs the command with the bundle's bin first on PATH and its lib on LD_LIBRARY_PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -d "$here/bin" ]; then
    tar -C "$here" -xJf "$here/bundle.tar.xz"
    have="$(ldconfig -p | awk 'NR > 1 {print $1}')" # the sonames this machine's loader knows
    for lib in "$here"/lib/*; do
        [ -e "$lib" ] || continue
        if grep -qxF "$(basename "$lib")" <<<"$have"; then rm -f "$lib"; fi
    done
fi
# CUDA's libraries (cuBLAS) are the machine's: its toolkit's folders, or the ones PyTorch's wheels hold
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
done
wheel_dir="$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)"
[ -n "$wheel_dir" ] && [ -d "$wheel_dir" ] && cuda_dirs="$cuda_dirs:$wheel_dir"
export PATH="$here/bin:$PATH"
export LD_LIBRARY_PATH="$here/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
EOF
chmod +x "$out/run.sh"
echo "cuda_bundle: $out/bundle.tar.xz ($(du -h "$out/bundle.tar.xz" | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')and $(ls "$stage/lib" | wc -l) libraries; run with $out/run.sh COMMAND"

#!/usr/bin/env bash
# Checks the architecture the folders promise (docs/ARCHITECTURE.md, "Layers"):
#  1. a folder of src/ includes only from itself and the folders below it, in this order:
#       util < format < text < synth < kernels < model < fetch < store < engine < serve < cli < main.c
#  2. only src/cli/settings.c reads the environment (getenv, secure_getenv, environ outside cli/);
#  3. only src/cli/ and src/main.c end the process (exit, _exit, df_die), except the documented
#     out-of-memory abort point in src/util/err.c;
#  4. only src/util/clock.c reads the monotonic clock;
#  5. the file-level call graph of src/model/ has no cycle: a file calls functions of the files
#     below it, never back into a caller (the layer schedule, k3.c, on top).
#  6. only src/cli/ and src/main.c handle signals (library code takes a stop request or a cancel
#     function instead: src/serve/server.h, engine.h's CancelFn).
#  7. the Engine is opaque outside src/engine/: only src/engine/*.c include engine_internal.h (its
#     struct and the store types in it), so src/serve/ and src/cli/ cannot read an Engine's field
#     (the compiler refuses it) and go through engine.h's functions (engine_info, engine_model...).
# Prints every violation as FILE:LINE: what, and exits 1 if there is any.
# usage: scripts/check_layers.sh [SRC_DIR]   (default: src)
set -euo pipefail
src="${1:-src}"
order=(util format text synth kernels model fetch store engine serve cli)
bad=0

rank() { # folder -> its place in the order, or -1
    local i
    for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
    echo -1
}

report() { echo "$1"; bad=1; }

# every folder of src/ has a place in the order
for d in "$src"/*/; do
    d=$(basename "$d")
    [ "$(rank "$d")" -ge 0 ] || report "$src/$d: a folder outside the layer order (add it to scripts/check_layers.sh and docs/ARCHITECTURE.md)"
done

# 1. includes point down (or sideways within a folder)
while IFS= read -r file; do
    rel=${file#"$src"/}
    folder=${rel%%/*}
    [ "$rel" = main.c ] && continue
    mine=$(rank "$folder")
    while IFS=: read -r line inc; do
        target=${inc%%/*}
        [ "$target" = "$inc" ] && continue # a header beside the file
        theirs=$(rank "$target")
        if [ "$theirs" -lt 0 ]; then
            report "$file:$line: includes \"$inc\" from a folder outside the layer order"
        elif [ "$theirs" -gt "$mine" ]; then
            report "$file:$line: $folder includes \"$inc\" from $target, a layer above it"
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" | sed 's/^\([0-9]*\):.*"\(.*\)".*/\1:\2/')
done < <(find "$src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)

# 2. the environment is read in one place
while IFS=: read -r file line text; do
    [ "$file" = "$src/cli/settings.c" ] && continue
    [[ "$text" =~ ^[[:space:]]*(\*|/\*|//) ]] && continue
    report "$file:$line: reads the environment (only $src/cli/settings.c may: add the setting to its table)"
done < <(grep -rnE '\b(getenv|secure_getenv)[[:space:]]*\(' "$src" || true)
while IFS=: read -r file line text; do
    case "$file" in "$src"/cli/*) continue ;; esac
    [[ "$text" =~ ^[[:space:]]*(\*|/\*|//) ]] && continue
    report "$file:$line: reads the environment through environ"
done < <(grep -rnE '\benviron\b' "$src" || true)

# 3. only the CLI ends the process
while IFS=: read -r file line text; do
    case "$file" in "$src"/cli/* | "$src"/main.c) continue ;; esac
    [[ "$text" =~ ^[[:space:]]*(\*|/\*|//) ]] && continue # a comment line
    if [ "$file" = "$src/util/err.c" ] && [[ "$text" =~ exit\(1\) ]]; then continue; fi # the OOM abort point
    report "$file:$line: ends the process (library code returns an error instead)"
done < <(grep -rnE '(^|[^a-z_])(exit|_exit|_Exit|quick_exit|df_die)[[:space:]]*\(' "$src" || true)

# 4. one clock: the monotonic clock is read in src/util/clock.c only (df_now)
while IFS=: read -r file line text; do
    [ "$file" = "$src/util/clock.c" ] && continue
    [[ "$text" =~ ^[[:space:]]*(\*|/\*|//) ]] && continue
    report "$file:$line: reads the monotonic clock itself (use df_now, src/util/clock.h)"
done < <(grep -rnE 'clock_gettime[[:space:]]*\([[:space:]]*CLOCK_MONOTONIC' "$src" || true)

# 5. no call cycle between the files of src/model/. A file's functions are the non-static ones it
# defines (a line that starts a definition: `type name(...) {`, or one whose parameters continue on
# the next lines); a file calls another when it names one of the other's functions followed by "(".
# The edges go to tsort, which reports a cycle as a loop.
model_edges() {
    local f g fn
    declare -A owner=()
    for f in "$src"/model/*.c; do
        while IFS= read -r fn; do owner[$fn]=$(basename "$f" .c); done < <(
            grep -E '^[A-Za-z_][A-Za-z0-9_ \*]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(' "$f" | grep -v '^static' | grep -v ';$' |
                sed -E 's/^[A-Za-z_][A-Za-z0-9_ \*]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/')
    done
    for f in "$src"/model/*.c; do
        local me
        me=$(basename "$f" .c)
        echo "$me $me"
        for fn in "${!owner[@]}"; do
            g=${owner[$fn]}
            [ "$g" = "$me" ] && continue
            if grep -qE "(^|[^A-Za-z0-9_])$fn\(" "$f"; then echo "$me $g"; fi
        done
    done | sort -u
}
if ! loop=$(model_edges | tsort 2>&1 >/dev/null) || [ -n "$loop" ]; then
    report "$src/model/: the files' call graph has a cycle (a file calls back into a caller): $(echo "$loop" | tr '\n' ' ')"
fi
# 6. signals are the CLI's: sigaction/signal only in src/cli/ and src/main.c
while IFS=: read -r file line text; do
    case "$file" in "$src"/cli/* | "$src"/main.c) continue ;; esac
    [[ "$text" =~ ^[[:space:]]*(\*|/\*|//) ]] && continue
    report "$file:$line: handles a signal (the CLI does: library code takes a stop request or a cancel function)"
done < <(grep -rnE '(^|[^a-z_])(sigaction|signal)[[:space:]]*\(' "$src" || true)

# 7. the Engine's fields are src/engine/'s: engine_internal.h is included by its .c files only (a
# header that included it would hand the struct to whoever includes that header)
while IFS=: read -r file line text; do
    case "$file" in "$src"/engine/*.c) continue ;; esac
    report "$file:$line: includes engine/engine_internal.h (outside src/engine/*.c the Engine is opaque: use engine.h's functions)"
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"engine/engine_internal\.h"' "$src" || true)

if [ "$bad" -ne 0 ]; then
    echo "check_layers: FAILED"
    exit 1
fi
echo "check_layers: ok (${order[*]}; environment in $src/cli/settings.c; exits and signals in $src/cli and $src/main.c; clock in $src/util/clock.c; no call cycle in $src/model/; the Engine opaque outside $src/engine: no Engine field read in $src/serve or $src/cli)"

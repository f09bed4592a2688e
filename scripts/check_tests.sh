#!/usr/bin/env bash
# Finds shell checks that cannot fail. Under `set -e` a command whose status is inverted with `!`
# never stops the script (bash exempts it, whatever the status), and without `set -e` nothing
# looks at it either: a line `! cmd` checks nothing. Write
#     if cmd; then echo "what went wrong"; exit 1; fi
# instead. This flags `!` where it starts a command: at the start of a line, or after `;`, `&&`,
# `||`, `{`, `(`, `then`, `do` or `else` (`if ! cmd` and `while ! cmd` are conditions, and fine).
# Prints every finding as FILE:LINE: text, and exits 1 if there is any.
# usage: scripts/check_tests.sh [FILE_OR_DIR...]   (default: tests bench scripts .ci)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests bench scripts .ci)
pattern='(^|;|&&|\|\||[{(]|\bthen|\bdo|\belse)[[:space:]]*![[:space:]]'
found=0
while IFS= read -r file; do
    while IFS=: read -r line text; do
        [[ "$text" =~ ^[[:space:]]*# ]] && continue # a comment
        echo "$file:$line: '!' inverts a status that nothing checks: $(sed 's/^[[:space:]]*//' <<<"$text")"
        found=1
    done < <(grep -nE "$pattern" "$file" || true)
done < <(find "${paths[@]}" -type f \( -name '*.sh' -o -path '*/.ci/run' \) -not -path '*/node_modules/*' | sort)
if [ "$found" -ne 0 ]; then
    echo "check_tests: FAILED (write: if cmd; then echo \"...\"; exit 1; fi)"
    exit 1
fi
echo "check_tests: ok (no '!' statement that nothing checks in ${paths[*]})"

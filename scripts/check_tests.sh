#!/usr/bin/env bash
# Finds shell checks that cannot fail, or that fail without saying why:
#  1. `! cmd` as a statement. Under `set -e` a command whose status is inverted with `!` never stops
#     the script (bash exempts it, whatever the status), and without `set -e` nothing looks at it
#     either: a line `! cmd` checks nothing. Write `if cmd; then fail "what went wrong"; fi` (or
#     expect_no_grep / expect_fail of tests/lib.sh) instead. This flags `!` where it starts a
#     command: at the start of a line, or after `;`, `&&`, `||`, `{`, `(`, `then`, `do` or `else`
#     (`if ! cmd` and `while ! cmd` are conditions, and fine).
#  2. A pipeline that starts with deltafin ("$DF ... | ...", also $DF_ASAN, $DFI, $df, $BIN) in a file
#     that does not set pipefail (`set -o pipefail`, or sourcing tests/lib.sh, which sets it): the
#     pipeline's status is its last command's, so deltafin's failure or crash goes unseen.
#  3. A bare `grep -q` statement (not a condition, nothing after `||`): under `set -e` it stops the
#     test with no message. Use expect_grep (tests/lib.sh), which prints what was wanted and what
#     came.
# Prints every finding as FILE:LINE: text, and exits 1 if there is any.
# usage: scripts/check_tests.sh [FILE_OR_DIR...]   (default: tests bench scripts .ci)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests bench scripts .ci)
bang='(^|;|&&|\|\||[{(]|\bthen|\bdo|\belse)[[:space:]]*![[:space:]]'
df_pipe='"\$\{?(DF[A-Z_]*|DFI|df|BIN|bin)\}?"([^|#]|\|\|)*\|([^|]|$)'
pipefail='^[[:space:]]*set -[a-zA-Z]*o pipefail|^[[:space:]]*(source|\.) .*lib\.sh'
bare_grep='^[[:space:]]*([^#]*\|[[:space:]]*)?grep -[a-zA-Z]*q'
condition='^[[:space:]]*(if|while|until|elif)\b|\|\||&&|\\$|\|$'
found=0
report() { # file, line, text, why
    echo "$1:$2: $4: $(sed 's/^[[:space:]]*//' <<<"$3")"
    found=1
}
while IFS= read -r file; do
    while IFS=: read -r line text; do
        [[ "$text" =~ ^[[:space:]]*# ]] && continue # a comment
        report "$file" "$line" "$text" "'!' inverts a status that nothing checks"
    done < <(grep -nE "$bang" "$file" || true)
    if ! grep -qE "$pipefail" "$file"; then
        while IFS=: read -r line text; do
            [[ "$text" =~ ^[[:space:]]*# ]] && continue
            report "$file" "$line" "$text" "a pipeline from deltafin in a file without pipefail"
        done < <(grep -nE "$df_pipe" "$file" || true)
    fi
    if [[ "$file" == tests/* ]]; then
        while IFS=: read -r line text; do
            [[ "$text" =~ ^[[:space:]]*# ]] && continue
            grep -qE "$condition" <<<"$text" && continue
            report "$file" "$line" "$text" "a bare 'grep -q' fails without saying why (use expect_grep)"
        done < <(grep -nE "$bare_grep" "$file" || true)
    fi
done < <(find "${paths[@]}" -type f \( -name '*.sh' -o -path '*/.ci/run' \) -not -path '*/node_modules/*' | sort)
if [ "$found" -ne 0 ]; then
    echo "check_tests: FAILED (see docs/TESTING.md: tests/lib.sh's checks, pipefail, no '!' statements)"
    exit 1
fi
echo "check_tests: ok (no unchecked '!', no deltafin pipeline without pipefail, no bare grep -q in ${paths[*]})"

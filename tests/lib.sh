# tests/lib.sh - sourced first by every shell test. It turns on strict mode and gives checks that say
# what was wanted and what came when they fail, so a red test's log names the reason:
#   set -Eeuo pipefail       a failing command stops the test, a pipeline fails when any part fails
#                            (`"$DF" ... | grep` cannot hide deltafin's exit status), unset names are
#                            errors; the ERR trap prints the file, line, status and command
#   fail MESSAGE             print FAIL: MESSAGE and exit 1
#   expect_eq WANT GOT WHAT  WHAT must be WANT
#   expect_grep [GREP_OPTION...] [--] PATTERN [FILE...]
#                            some line of the FILEs (or of stdin) matches PATTERN (grep's syntax)
#   expect_no_grep [GREP_OPTION...] [--] PATTERN [FILE...]
#                            no line matches
#   expect_fail [GREP_OPTION...] [--] PATTERN CMD [ARG...]
#                            CMD exits with a status in 1..123 (not 0, not a signal, a timeout or a
#                            missing program) and its output (stdout and stderr) matches PATTERN;
#                            the output stays in $EXPECT_OUT for further checks
#   quietly CMD [ARG...]     run CMD with its output kept in a file, printed only if CMD fails
#                            (in place of `>/dev/null 2>&1`, which hides the reason)
# The expect_* checks print what was wanted and what came and return 1 (so set -e stops the test,
# and `expect_... || fail "context"` adds to the message). Expects $DF_TEST_TMP when set (tests/run.sh
# sets it) for the captured outputs; else uses $TMPDIR.
[ -z "${DF_TEST_LIB:-}" ] || return 0 # sourced already (install_lib.sh sources it too)
DF_TEST_LIB=1
set -Eeuo pipefail
trap 'df_test_stopped $? "$BASH_COMMAND"' ERR

# Says where a command stopped the test, unless a check below already said why (df_said).
df_test_stopped() { # status command
    if [ -n "${DF_SAID:-}" ]; then DF_SAID=; return 0; fi
    echo "FAIL: ${BASH_SOURCE[1]:-?}:${BASH_LINENO[0]:-?}: exit status $1 from: $2" >&2
}
df_said() { DF_SAID=1; return 1; }

fail() { echo "FAIL: $*" >&2; exit 1; }

EXPECT_OUT="$(mktemp "${DF_TEST_TMP:-${TMPDIR:-/tmp}}/expect.XXXXXX")"

# Where the check was called from (the first frame outside this file's functions), for its message.
df_caller() {
    local i
    for ((i = 1; i < ${#FUNCNAME[@]}; i++)); do
        case "${FUNCNAME[$i]}" in df_* | expect_* | quietly) ;; *) break ;; esac
    done
    echo "${BASH_SOURCE[$i]:-?}:${BASH_LINENO[$((i - 1))]:-?}"
}

# Prints at most 40 lines of a file (its head and its tail), indented.
df_show() { # file
    local n
    n=$(wc -l <"$1")
    if [ "$n" -le 40 ]; then sed 's/^/  | /' "$1"
    else head -n 20 "$1" | sed 's/^/  | /'; echo "  | ... ($((n - 40)) lines) ..."; tail -n 20 "$1" | sed 's/^/  | /'; fi
    [ -s "$1" ] || echo "  | (nothing)"
}

expect_eq() { # want got what
    [ "$1" = "$2" ] && return 0
    echo "FAIL: $(df_caller): ${3:-a value}: wanted '$1', got '$2'" >&2
    df_said
}

# Splits "[GREP_OPTION...] [--] PATTERN REST..." into df_opts, df_pattern and df_rest.
df_grep_args() {
    df_opts=()
    while [ $# -gt 0 ] && [[ "$1" == -* ]]; do
        if [ "$1" = -- ]; then shift; break; fi
        df_opts+=("$1"); shift
    done
    [ $# -gt 0 ] || { echo "FAIL: $(df_caller): no pattern given" >&2; return 1; }
    df_pattern="$1"; shift
    df_rest=("$@")
}

# df_grep_check WANT_MATCH [GREP_OPTION...] PATTERN [FILE...]
df_grep_check() {
    local want="$1" where; shift
    df_grep_args "$@" || return 1
    local files=("${df_rest[@]}")
    if [ ${#files[@]} -eq 0 ]; then # stdin: kept to show it
        cat >"$EXPECT_OUT.in"
        files=("$EXPECT_OUT.in")
    fi
    local found=0
    if grep -q "${df_opts[@]}" -- "$df_pattern" "${files[@]}"; then found=1; fi
    [ "$found" = "$want" ] && return 0
    where="${df_rest[*]:-its input}"
    if [ "$want" = 1 ]; then
        echo "FAIL: $(df_caller): wanted a line matching '$df_pattern'${df_opts[*]:+ (grep ${df_opts[*]})} in $where; it holds:" >&2
        for f in "${files[@]}"; do
            if [ -f "$f" ]; then df_show "$f" >&2; else echo "  | $f: no such file" >&2; fi
        done
    else
        echo "FAIL: $(df_caller): wanted no line matching '$df_pattern'${df_opts[*]:+ (grep ${df_opts[*]})} in $where; these match:" >&2
        grep -n "${df_opts[@]}" -- "$df_pattern" "${files[@]}" | head -n 20 | sed 's/^/  | /' >&2 || true
    fi
    df_said
}
expect_grep() { df_grep_check 1 "$@"; }
expect_no_grep() { df_grep_check 0 "$@"; }

expect_fail() {
    df_grep_args "$@" || return 1
    [ ${#df_rest[@]} -gt 0 ] || { echo "FAIL: $(df_caller): expect_fail: no command given" >&2; return 1; }
    local status=0
    "${df_rest[@]}" >"$EXPECT_OUT" 2>&1 || status=$?
    if [ "$status" -ge 1 ] && [ "$status" -le 123 ] && grep -q "${df_opts[@]}" -- "$df_pattern" "$EXPECT_OUT"; then
        return 0
    fi
    local why="exited with status $status"
    [ "$status" -eq 0 ] && why="succeeded"
    [ "$status" -gt 128 ] && why="was killed by signal $((status - 128))"
    [ "$status" -eq 124 ] && why="timed out (status 124)"
    echo "FAIL: $(df_caller): wanted a failure saying '$df_pattern' from: ${df_rest[*]}" >&2
    echo "  it $why and printed:" >&2
    df_show "$EXPECT_OUT" >&2
    df_said
}

quietly() {
    local status=0
    "$@" >"$EXPECT_OUT" 2>&1 || status=$?
    [ "$status" -eq 0 ] && return 0
    echo "FAIL: $(df_caller): exit status $status from: $*; it printed:" >&2
    df_show "$EXPECT_OUT" >&2
    DF_SAID=1
    return "$status"
}

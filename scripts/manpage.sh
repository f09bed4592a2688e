#!/usr/bin/env bash
# Writes deltafin(1) in roff on stdout, made from the program's own help text (deltafin --help,
# deltafin help COMMAND, deltafin help settings), so the page says what the binary says.
# usage: scripts/manpage.sh build/deltafin > deltafin.1
set -euo pipefail
df="${1:?usage: manpage.sh path/to/deltafin}"
version=$("$df" --version | sed -n 1p)

# Help text -> roff. Paragraphs become .PP, "  -x, --name ARG   text" lines become .TP entries
# (their continuation lines join them), "title:" lines become bold subheadings; the first line
# ("usage: ...") is left to the caller.
to_roff() {
    awk '
    function esc(s) { gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); sub(/^[.\047]/, "\\\\&&", s); return s }
    NR == 1 { next }
    /^$/ { if (!blank) print ".PP"; blank = 1; next }
    { blank = 0 }
    /^[a-z][^:]*:$/ { print ".PP"; print "\\fB" esc($0) "\\fR"; next }
    /^  [- ][- a-zA-Z]/ && /^  (-[a-zA-Z], |    )--/ {
        line = $0; sub(/^  /, "", line); sub(/^    /, "", line)
        n = match(line, /   +/)
        head = n ? substr(line, 1, n - 1) : line
        text = n ? substr(line, n) : ""
        sub(/^ +/, "", text)
        print ".TP"; print "\\fB" esc(head) "\\fR"
        if (text != "") print esc(text)
        next
    }
    /^  [a-z][a-z-]+   +[^ ]/ { # a command and what it does
        line = $0; sub(/^  /, "", line)
        n = match(line, /   +/)
        print ".TP"; print "\\fB" esc(substr(line, 1, n - 1)) "\\fR"
        text = substr(line, n); sub(/^ +/, "", text); print esc(text)
        next
    }
    { line = $0; sub(/^ +/, "", line); print esc(line) }
    '
}

cat <<ROFF
.TH DELTAFIN 1 "" "$version" "User Commands"
.SH NAME
deltafin \- run Kimi K3 exactly on a machine whose RAM is a fraction of the model
.SH SYNOPSIS
.B deltafin
.I COMMAND
[\fIoptions\fR]
.br
.B deltafin help
[\fICOMMAND\fR | \fBsettings\fR]
.br
.B deltafin \-\-version
.SH DESCRIPTION
ROFF
"$df" --help | to_roff
echo ".SH COMMANDS"
for c in $("$df" --help | awk '/^commands:$/ { on = 1; next } /^$/ { on = 0 } on { print $1 }'); do
    usage=$("$df" help "$c" | sed -n 's/^usage: //p')
    printf '.SS "%s"\n' "$(printf '%s' "$usage" | sed 's/\\/\\e/g; s/-/\\-/g; s/"/\\(dq/g')"
    # (the settings have their own section)
    "$df" help "$c" | sed '/^settings /,$d; /^Every setting is/,$d' | to_roff
done
echo ".SH SETTINGS"
{ echo; "$df" help settings | sed -n '/^Every setting is/,$p'; } | to_roff
cat <<'ROFF'
.SH FILES
.TP
.I $XDG_CACHE_HOME/deltafin
(default \fI~/.cache/deltafin\fR) the default install: where \fBdeltafin setup\fR puts K3 and
every command looks for it.
.TP
.I PREFIX/share/deltafin/models/k3-mini
the bundled model, used when no other is given or installed.
.TP
.I $XDG_STATE_HOME/deltafin/chat_history
(default \fI~/.local/state/deltafin/chat_history\fR) chat's line history.
.SH EXIT STATUS
0 done, 1 an error (one line on stderr), 2 a usage error, 130 interrupted.
ROFF

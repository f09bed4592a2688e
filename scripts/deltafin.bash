# bash completion for deltafin: commands, each command's options and the settings' options, all
# read from the program's own help, so they follow the binary being completed.
# Installed by `make install` as PREFIX/share/bash-completion/completions/deltafin.

# The options of a command: its help's and every setting's (a command's help lists only the
# settings it uses; "--[no-]spec" gives --spec and --no-spec).
_deltafin_options() {
    { "$1" help "$2"; "$1" help settings; } 2>/dev/null | grep -oE -- '(^|[ ,(])-(-(\[no-\])?[a-z0-9][a-z0-9-]*|[a-zA-Z])' |
        sed -E 's/^[ ,(]//' | sed -E 's/^--\[no-\](.*)$/--\1\n--no-\1/' | sort -u
}

_deltafin() {
    local df="${COMP_WORDS[0]}" cur="${COMP_WORDS[COMP_CWORD]}" prev="" cmd="${COMP_WORDS[1]:-}"
    [ "$COMP_CWORD" -gt 0 ] && prev="${COMP_WORDS[COMP_CWORD-1]}"
    local commands
    commands=$("$df" --help 2>/dev/null | awk '/^commands:$/ { on = 1; next } /^$/ { on = 0 } on { print $1 }')
    if [ "$COMP_CWORD" -eq 1 ]; then
        mapfile -t COMPREPLY < <(compgen -W "$commands --help --version" -- "$cur")
        return
    fi
    if [ "$cmd" = help ]; then
        mapfile -t COMPREPLY < <(compgen -W "$(printf '%s\n' $commands settings | sort -u)" -- "$cur")
        return
    fi
    case "$prev" in
    -m | --model | --root | -o | --out | --tmpdir)
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        return ;;
    -f | --file | --tokens-file | --text | --json | --stats-json | --load | --chat | --router-trace | --trace)
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return ;;
    esac
    if [[ "$cur" == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_deltafin_options "$df" "$cmd")" -- "$cur")
    elif [ "$cmd" = inspect ]; then
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
    fi
}
complete -F _deltafin deltafin

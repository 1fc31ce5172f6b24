"""Static shell completion scripts for `ddtctl completion bash|zsh|fish`.

The scripts are rendered from a snapshot of the typer application's command/option tree kept in
`ddtctl/cli/_completion_tree.py`, so printing one imports neither typer nor the command modules (the fast path
in ddtctl/cli/fastpath.py serves `ddtctl completion SHELL` without building the app).
tests/cli/test_cli_basics.py fails when the snapshot no longer matches the application; regenerate it with

    .venv/bin/python tools/completion_tree.py --write

(the generator lives outside the package: it builds the whole application, which imports this module).

A tree node is a dict: `help` (one line), `options` (a list of [names, takes_value, choices, help]; choices is
empty when the value is free, e.g. a path), `args` (None: no positional arguments, []: free (files), or the
list of choices) and `commands` (name -> node). Hidden commands and options (the deprecated aliases) are left
out.
"""

from __future__ import annotations

import re

from ddtctl import __version__

SHELLS = ("bash", "zsh", "fish")
_WORD = re.compile(r"^[A-Za-z0-9_.:+/@-]+$")  # what a command, option or choice may look like in a script
_OPTION = re.compile(r"^(-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9-]*)$")


def load_tree() -> dict:
    from ddtctl.cli._completion_tree import TREE

    return TREE


# -------------------------------------------------------------------------------------------------- rendering
def _nodes(tree: dict, path: str = "ddtctl"):
    """(path, node) for every node, depth first; a path is the command words, e.g. `ddtctl env create`."""
    yield path, tree
    for name, sub in tree["commands"].items():
        yield from _nodes(sub, f"{path} {name}")


def _check(tree: dict) -> None:
    for path, node in _nodes(tree):
        words = list(node["commands"]) + list(node["args"] or ())
        for names, _, choices, _ in node["options"]:
            bad = [n for n in names if not _OPTION.match(n)]
            if bad:
                raise ValueError(f"{path}: option name {bad[0]!r} cannot go into a completion script")
            words += choices
        bad = [w for w in words if not _WORD.match(w)]
        if bad:
            raise ValueError(f"{path}: {bad[0]!r} cannot go into a completion script")


def _value_options(node: dict) -> list[str]:
    return [n for names, takes_value, _, _ in node["options"] if takes_value for n in names]


def _all_options(node: dict) -> list[str]:
    return [n for names, _, _, _ in node["options"] for n in names]


def _header(shell: str) -> str:
    return (
        f"# {shell} completion for ddtctl {__version__} (static; printed by `ddtctl completion {shell}`).\n"
        "# Commands and options only: host names, profiles and paths complete as files.\n"
    )


def _sq(text: str) -> str:
    """A POSIX/zsh single-quoted word."""
    return "'" + text.replace("'", "'\\''") + "'"


# bash: the completion function itself, after the generated tables (_ddtctl_node, _values, _args)
_BASH_MAIN = r"""_ddtctl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cpath=ddtctl w opt i skip=0 dashdash=0 cmds opts vopts
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [[ $w == "=" ]]; then skip=1; continue; fi  # --opt=value, split at COMP_WORDBREAKS' "="
        if ((skip)); then skip=0; continue; fi
        if [[ $w == "--" ]]; then dashdash=1; break; fi
        _ddtctl_node "$cpath"
        if [[ $w == -* ]]; then
            if [[ $w != *=* && " $vopts " == *" $w "* ]]; then skip=1; fi
        elif [[ " $cmds " == *" $w "* ]]; then
            cpath="$cpath $w"
        fi
    done
    _ddtctl_node "$cpath"
    if ((dashdash)); then return 0; fi  # after `--`: files (complete -o default)
    if [[ $cur == "=" ]]; then  # `--opt=` with nothing typed after the "="
        cur=""
        _ddtctl_values "$cpath" "${COMP_WORDS[COMP_CWORD-1]}"
        return 0
    fi
    if ((skip)); then
        opt="${COMP_WORDS[COMP_CWORD-1]}"
        if [[ $opt == "=" ]]; then opt="${COMP_WORDS[COMP_CWORD-2]}"; fi
        _ddtctl_values "$cpath" "$opt"
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ -n $cmds ]]; then
        COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
    else
        _ddtctl_args "$cpath"
    fi
    return 0
}

complete -o bashdefault -o default -F _ddtctl ddtctl
"""


def _choice_cases(tree: dict) -> list[tuple[str, list[str]]]:
    """(shell case pattern "'cmd path|--opt'|...", its choices) for every option with a fixed set of values:
    the `_ddtctl_values` cases of the bash and zsh scripts."""
    cases = []
    for path, node in _nodes(tree):
        for names, takes_value, choices, _ in node["options"]:
            if takes_value and choices:
                cases.append(("|".join(_sq(f"{path}|{n}") for n in names), list(choices)))
    return cases


def render_bash(tree: dict) -> str:
    lines = [
        _header("bash")
        + '# Load it with: eval "$(ddtctl completion bash)" (e.g. in ~/.bashrc), or save it as\n'
        "# ~/.local/share/bash-completion/completions/ddtctl.",
        "",
        "_ddtctl_node() {",
        '    case "$1" in',
    ]
    for path, node in _nodes(tree):
        lines.append(f"        {_sq(path)})")
        lines.append(f"            cmds={_sq(' '.join(node['commands']))}")
        lines.append(f"            opts={_sq(' '.join(_all_options(node)))}")
        lines.append(f"            vopts={_sq(' '.join(_value_options(node)))} ;;")
    lines += [
        "        *) cmds='' opts='' vopts='' ;;",
        "    esac",
        "}",
        "",
        "_ddtctl_values() {  # the value of option $2 of command $1",
        '    case "$1|$2" in',
    ]
    for pattern, choices in _choice_cases(tree):
        lines.append(f'        {pattern}) COMPREPLY=($(compgen -W {_sq(" ".join(choices))} -- "$cur")) ;;')
    lines += [
        "    esac",
        "}",
        "",
        "_ddtctl_args() {  # a positional argument of command $1",
        '    case "$1" in',
    ]
    for path, node in _nodes(tree):
        if node["args"]:
            lines.append(
                f'        {_sq(path)}) COMPREPLY=($(compgen -W {_sq(" ".join(node["args"]))} -- "$cur")) ;;'
            )
    lines += [
        "    esac",
        "}",
        "",
        _BASH_MAIN,
    ]
    return "\n".join(lines)


def _zdesc(name: str, help_text: str) -> str:
    """One `name:description` item of _describe, single-quoted."""
    return _sq(f"{name}:{help_text}" if help_text else name)


# zsh: the same, after its tables
_ZSH_MAIN = r"""_ddtctl() {
    local -a cmdnames cmds opts vopts
    local cpath=ddtctl w opt cur=${words[CURRENT]}
    integer i skip=0 dashdash=0
    for ((i = 2; i < CURRENT; i++)); do
        w=${words[i]}
        if ((skip)); then skip=0; continue; fi
        if [[ $w == -- ]]; then dashdash=1; break; fi
        _ddtctl_node "$cpath"
        if [[ $w == -* ]]; then
            if [[ $w != *=* ]] && ((${vopts[(Ie)$w]})); then skip=1; fi
        elif ((${cmdnames[(Ie)$w]})); then
            cpath="$cpath $w"
        fi
    done
    _ddtctl_node "$cpath"
    if ((dashdash)); then _files; return; fi
    if ((skip)); then _ddtctl_values "$cpath" "${words[CURRENT-1]}"; return; fi
    if [[ $cur == -*=* ]]; then
        opt=${cur%%=*}
        compset -P '*='
        _ddtctl_values "$cpath" "$opt"
        return
    fi
    if [[ $cur == -* ]]; then
        _describe -t options option opts
    elif (($#cmds)); then
        _describe -t commands command cmds
    else
        _ddtctl_args "$cpath"
    fi
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _ddtctl "$@"
else
    compdef _ddtctl ddtctl
fi
"""


def render_zsh(tree: dict) -> str:
    lines = [
        "#compdef ddtctl",
        _header("zsh") + '# Load it with: eval "$(ddtctl completion zsh)" in ~/.zshrc (after '
        "compinit), or save it as _ddtctl\n# in a directory of $fpath.",
        "",
        "_ddtctl_node() {",
        '    case "$1" in',
    ]
    for path, node in _nodes(tree):
        lines.append(f"        {_sq(path)})")
        cmds = " ".join(_zdesc(n, sub["help"]) for n, sub in node["commands"].items())
        opts = " ".join(_zdesc(n, h) for names, _, _, h in node["options"] for n in names)
        lines.append(f"            cmdnames=({' '.join(node['commands'])})")
        lines.append(f"            cmds=({cmds})")
        lines.append(f"            opts=({opts})")
        lines.append(f"            vopts=({' '.join(_value_options(node))}) ;;")
    lines += [
        "        *) cmdnames=() cmds=() opts=() vopts=() ;;",
        "    esac",
        "}",
        "",
        "_ddtctl_values() {  # the value of option $2 of command $1",
        '    case "$1|$2" in',
    ]
    for pattern, choices in _choice_cases(tree):
        lines.append(f"        {pattern}) compadd -- {' '.join(choices)} ;;")
    lines += [
        "        *) _files ;;",
        "    esac",
        "}",
        "",
        "_ddtctl_args() {  # a positional argument of command $1",
        '    case "$1" in',
    ]
    for path, node in _nodes(tree):
        if node["args"]:
            lines.append(f"        {_sq(path)}) compadd -- {' '.join(node['args'])} ;;")
    lines += [
        "        *) _files ;;",
        "    esac",
        "}",
        "",
        _ZSH_MAIN,
    ]
    return "\n".join(lines)


def _fq(text: str) -> str:
    """A fish single-quoted word."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_fish(tree: dict) -> str:
    lines = [
        _header("fish") + "# Save it as ~/.config/fish/completions/ddtctl.fish (or: ddtctl completion fish | "
        "source).",
        "",
        "function __ddtctl_node --argument-names p",
        "    switch $p",
    ]
    for path, node in _nodes(tree):
        lines.append(f"        case {_fq(path)}")
        lines.append(f"            set -g __ddtctl_cmds {' '.join(node['commands'])}".rstrip())
        lines.append(f"            set -g __ddtctl_vopts {' '.join(_value_options(node))}".rstrip())
    lines += [
        "        case '*'",
        "            set -g __ddtctl_cmds",
        "            set -g __ddtctl_vopts",
        "    end",
        "end",
        "",
        r"""# the command words before the cursor, e.g. `ddtctl env create`
function __ddtctl_path
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l p ddtctl
    set -l skip 0
    for w in $tokens
        if test $skip -eq 1
            set skip 0
            continue
        end
        if test "$w" = --
            break
        end
        __ddtctl_node $p
        if string match -q -- '-*' $w
            if not string match -q -- '*=*' $w; and contains -- $w $__ddtctl_vopts
                set skip 1
            end
        else if contains -- $w $__ddtctl_cmds
            set p "$p $w"
        end
    end
    echo $p
end

function __ddtctl_at
    test (__ddtctl_path) = "$argv[1]"
end

complete -c ddtctl -f""",
    ]
    for path, node in _nodes(tree):
        cond = f"-n {_fq('__ddtctl_at ' + _sq(path))}"
        for name, sub in node["commands"].items():
            lines.append(f"complete -c ddtctl {cond} -a {name} -d {_fq(sub['help'])}")
        for names, takes_value, choices, help_text in node["options"]:
            spec = " ".join(f"-s {n[1:]}" if not n.startswith("--") else f"-l {n[2:]}" for n in names)
            if takes_value:
                spec += f" -x -a {_fq(' '.join(choices))}" if choices else " -r -F"
            lines.append(f"complete -c ddtctl {cond} {spec} -d {_fq(help_text)}")
        if node["args"]:
            lines.append(f"complete -c ddtctl {cond} -a {_fq(' '.join(node['args']))}")
        elif node["args"] is not None:
            lines.append(f"complete -c ddtctl {cond} -F")
    return "\n".join(lines) + "\n"


def script(shell: str, tree: dict | None = None) -> str:
    """The completion script for SHELL (bash, zsh or fish)."""
    tree = load_tree() if tree is None else tree
    _check(tree)
    render = {"bash": render_bash, "zsh": render_zsh, "fish": render_fish}.get(shell)
    if render is None:
        raise ValueError(f"unknown shell {shell!r} (one of {', '.join(SHELLS)})")
    return render(tree)
